"""How many gradients each return of a Function's backward gives, against what torch will expect.

One question, `backward_return_counts(model)`: for each Function whose forward inputs can be
counted, how many inputs forward takes, how many gradients torch will want (its required inputs,
or more when a call of apply in the file passes a defaulted one), and each return of backward
whose values can be counted statically, with which of them are the literal None. A backward that
surely reaches its end with no `return` gives one None, on its def.

A Function none of whose outputs can carry a gradient is left out: torch never calls its
backward, so no count is ever checked. Measured on torch 2.13: forward marking every output it
returns non-differentiable gives outputs with `requires_grad=False` and no `grad_fn`, and a
backward returning `()` for two inputs never raises, alone or with the output used beside a
differentiable tensor (Pointnet2's furthest-point sampling, three_nn and ball_query).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradlint.file_model import AutogradFunction, FileModel, has_return, leading_params, returns_in
from gradlint.flow import ReturnValue
from gradlint.prescan import target_names
from gradlint.saved_tensors import outputs_marked_non_differentiable
from gradlint.values import Kind, Val


@dataclass(frozen=True)
class CountedReturn:
    """One return of backward whose values can be counted."""

    node: cst.CSTNode  # the return statement; the def's name when backward falls off its end
    nones: tuple[bool, ...]  # per value returned: whether it is the literal None
    falls_off: bool  # no `return` at all: backward returns one None


@dataclass(frozen=True)
class BackwardReturns:
    """What torch will compare: the gradients backward returns and the inputs forward takes."""

    function: AutogradFunction
    inputs: int  # forward's inputs (ctx excluded; a custom op's parameters)
    needed: int  # the gradients torch wants: the required inputs, or what apply calls pass
    returns: tuple[CountedReturn, ...]


def backward_return_counts(model: FileModel) -> list[BackwardReturns]:
    """In file order; Functions whose forward takes *args/**kwargs, or whose backward takes no
    parameter, are left out, and so are returns that cannot be counted."""
    found = []
    never_differentiable = _outputs_never_differentiable(model)
    for function in model.function_classes:
        inputs = function.forward_inputs
        if function.backward is None or inputs is None or not function.backward.params.params \
                or function.name in never_differentiable:
            continue
        total = len(inputs)
        required = sum(1 for p in inputs if p.default is None)
        # torch wants one gradient per argument apply was given: a defaulted input that a call
        # in this file passes needs one too.
        passed = [n for n in (_positional_count(call) for call in model.apply_calls(function.name)) if n is not None]
        needed = min(total, max([required, *passed]))
        tuples, singles = _locals(function.backward)
        ends = [(statement, _count(statement.value, tuples, singles), False)
                for statement in returns_in(function.backward)]
        if not has_return(function.backward) and _ends_plainly(function.backward.body.body):
            ends.append((function.backward.name, [True], True))  # no `return`: backward returns one None
        counted_ends = tuple(CountedReturn(node, tuple(counted), falls_off)
                             for node, counted, falls_off in ends if counted is not None)
        found.append(BackwardReturns(function, total, needed, counted_ends))
    return found


def _outputs_never_differentiable(model: FileModel) -> set[str]:
    """The Functions whose forward returns, on every `return`, only outputs passed to
    ctx.mark_non_differentiable, integer tensors (never differentiable: the ground truth's B.b)
    or values that are no tensor. An output of unknown kind, or one not marked, may carry a
    gradient."""
    found = set()
    for function, walk in model.autograd_walks:
        if walk.role.kind != "forward":
            continue  # setup_context marks what forward returned: its outputs are not walked here
        marked = outputs_marked_non_differentiable(walk)
        returns = walk.of(ReturnValue)
        if returns and all(_never_differentiable(r.value, marked) for r in returns):
            found.add(function.name)
    return found


def _never_differentiable(value: Val, marked: set[int]) -> bool:
    if value.binding is not None and value.binding in marked:
        return True  # whatever its kind is known to be: mark_non_differentiable takes tensors only
    if value.kind is Kind.CONTAINER:
        return value.item is None and all(_never_differentiable(e, marked) for e in value.elements)
    return value.kind is Kind.SCALAR or value.none or (value.is_tensor and value.int64)


# Each returned value: True when it is the literal None, False otherwise.
Counted = list[bool]


def _count(expr: cst.BaseExpression | None, tuples: dict[str, Counted | None], singles: set[str]) -> Counted | None:
    """The values a backward `return` gives, or None when they cannot be counted statically."""
    if expr is None:
        return [True]
    if isinstance(expr, cst.Tuple):
        if any(isinstance(e, cst.StarredElement) for e in expr.elements):
            return None
        return [_is_none(e.value) for e in expr.elements]
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, cst.Add):
            left, right = _count(expr.left, tuples, singles), _count(expr.right, tuples, singles)
            if left is None or right is None or not _is_tuple_like(expr.left, tuples) \
                    or not _is_tuple_like(expr.right, tuples):
                return None
            return left + right
        if isinstance(expr.operator, cst.Multiply):
            for seq, times in ((expr.left, expr.right), (expr.right, expr.left)):
                if isinstance(times, cst.Integer) and _is_tuple_like(seq, tuples):
                    counted = _count(seq, tuples, singles)
                    return None if counted is None else counted * int(times.value)
            return [False] if not _is_tuple_like(expr.left, tuples) and not _is_tuple_like(expr.right, tuples) else None
        return [False]  # arithmetic on gradients: one tensor
    if isinstance(expr, cst.Name):
        if expr.value == "None":
            return [True]
        if expr.value in tuples:
            return tuples[expr.value]
        return [False] if expr.value in singles else None
    if isinstance(expr, cst.UnaryOperation):
        return [False]
    if isinstance(expr, cst.Subscript):
        # One element of a tuple, or a slice of one gradient tensor, is one value.
        single = len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index)
        base_single = isinstance(expr.value, cst.Name) and expr.value.value in singles
        return [False] if single or base_single else None
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and isinstance(expr.func.value, cst.Name) and expr.func.value.value in singles:
        return [False]  # grad_output.clone(), grad.neg()
    return None


def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _is_tuple_like(expr: cst.BaseExpression, tuples: dict[str, Counted | None]) -> bool:
    return isinstance(expr, cst.Tuple) or (isinstance(expr, cst.Name) and expr.value in tuples) or (
        isinstance(expr, cst.BinaryOperation) and (_is_tuple_like(expr.left, tuples) or _is_tuple_like(expr.right, tuples)))


def _locals(backward: cst.FunctionDef) -> tuple[dict[str, Counted | None], set[str]]:
    """Names bound to tuple literals (countable once, uncountable if rebound differently) and
    names that hold one tensor (the incoming gradients, arithmetic on them)."""
    collect = _Locals(backward)
    backward.visit(collect)
    tuples, singles = collect.tuples, collect.singles
    for name in collect.assigned_other:
        tuples.pop(name, None)
        singles.discard(name)
    return tuples, singles - set(tuples)


class _Locals(cst.CSTVisitor):
    """_locals' walk. A module-level class: one made inside the function, with methods closing over
    its locals, is a reference cycle that keeps the tree until the cyclic collector runs."""

    def __init__(self, backward: cst.FunctionDef):
        self.backward = backward
        self.tuples: dict[str, Counted | None] = {}
        self.singles = {p.name.value for p in backward.params.params[leading_params(backward) + 1:]}
        self.assigned_other: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.backward

    def visit_Assign(self, node: cst.Assign) -> None:
        tuples = self.tuples
        for target in node.targets:
            if not isinstance(target.target, cst.Name):
                for name in target_names(target.target):
                    self.assigned_other.add(name)
                continue
            name = target.target.value
            if isinstance(node.value, cst.Tuple) or (
                    isinstance(node.value, cst.BinaryOperation) and _is_tuple_like(node.value, tuples)):
                counted = _count(node.value, tuples, self.singles)
                if name in tuples and tuples[name] != counted:
                    counted = None
                tuples[name] = counted
            elif isinstance(node.value, (cst.BinaryOperation, cst.UnaryOperation)) or (
                    isinstance(node.value, cst.Call) and isinstance(node.value.func, cst.Attribute)):
                self.singles.add(name)
            else:
                self.assigned_other.add(name)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Name) and node.target.value in self.tuples:
            self.tuples[node.target.value] = None


def _positional_count(call: cst.Call) -> int | None:
    """How many arguments a call passes; None when a `*args` makes it unknown."""
    if any(a.star for a in call.args):
        return None
    return sum(1 for a in call.args if a.keyword is None)


def _ends_plainly(statements) -> bool:
    """Whether a body with no `return` surely reaches its end: its last statement is a plain one
    (not a raise), and it is no placeholder (a docstring, `pass`, `...`: an abstract method)."""
    if not statements or all(_placeholder(s) for s in statements):
        return False
    last = statements[-1]
    if isinstance(last, cst.SimpleStatementLine):
        return not any(isinstance(s, cst.Raise) for s in last.body)
    if isinstance(last, (cst.If, cst.For)):
        return True  # a raise inside may end some paths; the others still end with no return
    return False


def _placeholder(statement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(s, cst.Pass) or (isinstance(s, cst.Expr) and isinstance(s.value, (cst.SimpleString, cst.Ellipsis,
                                                                                       cst.ConcatenatedString)))
        for s in statement.body)
