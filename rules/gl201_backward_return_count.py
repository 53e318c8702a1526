from __future__ import annotations

from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint.file_model import AutogradFunction, FileModel, has_return, leading_params, returns_in
from gradlint.findings import Severity
from gradlint.prescan import target_names
from gradlint.rule import Hit, Invalid, Rule

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
    tuples: dict[str, Counted | None] = {}
    singles = {p.name.value for p in backward.params.params[leading_params(backward) + 1:]}
    assigned_other: set[str] = set()

    class Collect(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is backward

        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                if not isinstance(target.target, cst.Name):
                    for name in target_names(target.target):
                        assigned_other.add(name)
                    continue
                name = target.target.value
                if isinstance(node.value, cst.Tuple) or (
                        isinstance(node.value, cst.BinaryOperation) and _is_tuple_like(node.value, tuples)):
                    counted = _count(node.value, tuples, singles)
                    if name in tuples and tuples[name] != counted:
                        counted = None
                    tuples[name] = counted
                elif isinstance(node.value, (cst.BinaryOperation, cst.UnaryOperation)) or (
                        isinstance(node.value, cst.Call) and isinstance(node.value.func, cst.Attribute)):
                    singles.add(name)
                else:
                    assigned_other.add(name)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if isinstance(node.target, cst.Name) and node.target.value in tuples:
                tuples[node.target.value] = None

    backward.visit(Collect())
    for name in assigned_other:
        tuples.pop(name, None)
        singles.discard(name)
    return tuples, singles - set(tuples)


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


class BackwardReturnCount(Rule):
    code = "GL201"
    name = "backward-return-count"
    severity = Severity.ERROR
    summary = "backward returns a different number of gradients than forward has inputs"
    markers = (("autograd", "def backward"), "register_autograd")
    doc = """
## What it does
Counts the values each `return` of an autograd Function's `backward` gives and compares them
with forward's inputs (ctx excluded; with `setup_context`, all of forward's parameters; for a
`torch.library.custom_op`, the op's parameters). Fewer values than forward's required inputs
(and than the arguments a call of `.apply` in the file passes: a defaulted input it passes needs
a gradient too), or extra values that are not `None`, are reported. A backward with no `return`
at all returns one `None`: reported on its `def` when forward takes two or more inputs. Returns
that cannot be counted statically (a call, `*starred`, `tuple(...)`), returns after an
unconditional one (dead code), and forwards taking `*args`/`**kwargs` are skipped.

## Why is this bad?
torch checks the count only when backward finally runs, often hours into training or only on the
code path that needs that gradient. It raises, e.g.
`RuntimeError: function ScaleBackward returned an incorrect number of gradients (expected 2, got 1)`.
One gradient (or `None`) is needed for every input, non-tensor inputs included. Trailing extra
`None`s are accepted by torch and are not reported; an extra value that is not `None` raises the
same error with the larger count.

The message gives the two counts torch's error will give. For a `torch.library.custom_op`,
torch's generated node (`GeneratedBackwardFor_<ns>_<op>_defaultBackward`) counts one internal
input more than the op has, so a backward returning one value for two inputs reads
`RuntimeError: function GeneratedBackwardFor_gl_gather_defaultBackward returned an incorrect number of gradients (expected 3, got 2)`;
an extra value that is not `None` there raises
`RuntimeError: function GeneratedBackwardFor_gl_gather_defaultBackward returned a gradient different than None at position 3, but the corresponding forward input was not a Variable`
for `return g, g, g` (torch counts from 0 after its internal input, so the position is the
value's own, counted from 1). Measured on torch 2.13.

## Example
```python
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor
```

## Use instead
```python
    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None
```
"""
    VALID = (
        # Every path returns (the guard makes the end unreachable), and a short return after an
        # unconditional one never runs.
        """
import torch
class Pull(torch.autograd.Function):
    @staticmethod
    def forward(ctx, image, grid, bound):
        return image
    @staticmethod
    def backward(ctx, grad):
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return None, None, None
        if ctx.needs_input_grad[0]:
            return grad, None, None
        if ctx.needs_input_grad[1]:
            return None, grad, None
class Sparse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pattern, scale):
        return x
    @staticmethod
    def backward(ctx, grad):
        return grad, None, None
        return grad, None
""",
        """
import torch
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        return x * factor
    @staticmethod
    def backward(ctx, grad):
        if ctx.needs_input_grad[0]:
            return grad * 2, None
        return None, None, None, None
""",
        """
import torch
class Seg(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, dim_size):
        return src
    @staticmethod
    def backward(ctx, grad):
        grads = (grad, None)
        if ctx.extra:
            return compute(grad)
        return grads + (None,)
""",
        """
import torch
class Base(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return x * w
    @staticmethod
    def backward(ctx, g):
        return g, g
class Scaled(Base):
    @classmethod
    def forward(cls, ctx, x, w):
        return super().forward(ctx, x, w)
    @classmethod
    def backward(cls, ctx, g):
        return g, g
""",
        """
import torch
class Var(torch.autograd.Function):
    @staticmethod
    def forward(ctx, *tensors):
        return tensors[0]
    @staticmethod
    def backward(ctx, grad):
        return grad
""",
    )
    INVALID = (
        # No `return` at all: backward gives one None; and a defaulted input a call passes.
        Invalid("""
import torch
class Clip(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.bounds = (lo, hi)
        return x.clamp(lo, hi)
    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        grad_x = grad * (x > ctx.bounds[0])
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index, dim=0):
        ctx.save_for_backward(index)
        return x.index_select(dim, index)
    @staticmethod
    def backward(ctx, g):
        return g, None
gather = Gather.apply
def pick(x, index):
    return gather(x, index, 1)
""", ("def backward(ctx, grad):", "return g, None")),
        Invalid("""
import torch
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        return x * factor
    @staticmethod
    def backward(ctx, grad):
        if ctx.needs_input_grad[0]:
            return grad * 2
        return (None, grad, grad)
""", ("return grad * 2", "return (None, grad, grad)")),
        Invalid("""
import torch
class Seg(torch.autograd.Function):
    @staticmethod
    def forward(src, index, dim_size, reduce):
        return src
    @staticmethod
    def setup_context(ctx, inputs, output):
        pass
    @staticmethod
    def backward(ctx, grad):
        out = (grad,) + (None,) * 2
        return out
""", ("return out",)),
        Invalid("""
import torch
@torch.library.custom_op("gl::gather", mutates_args=())
def gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return x[idx]
def backward(ctx, g):
    return g
gather.register_autograd(backward)
""", ("return g",)),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for function in model.function_classes:
            inputs = function.forward_inputs
            if function.backward is None or inputs is None or not function.backward.params.params:
                continue
            total = len(inputs)
            required = sum(1 for p in inputs if p.default is None)
            # torch wants one gradient per argument apply was given: a defaulted input that a call
            # in this file passes needs one too.
            passed = [n for n in (_positional_count(call) for call in model.apply_calls(function.name)) if n is not None]
            needed = min(total, max([required, *passed]))
            tuples, singles = _locals(function.backward)
            ends: list[tuple[cst.CSTNode, Counted | None]] = [
                (statement, _count(statement.value, tuples, singles)) for statement in returns_in(function.backward)]
            if not has_return(function.backward) and _ends_plainly(function.backward.body.body):
                ends.append((function.backward.name, [True]))  # no `return`: backward returns one None
            for statement, counted in ends:
                if counted is None:
                    continue
                got = len(counted)
                if got < needed:
                    yield Hit(statement, self._fewer(function, got, total, needed, statement is function.backward.name),
                              subject=function.name)
                elif got > total and not all(counted[total:]):
                    yield Hit(statement, self._more(function, got, total, counted), subject=function.name)

    def _fewer(self, function: AutogradFunction, got: int, total: int, needed: int, falls_off: bool) -> str:
        given = (f"forward takes {total} input{'s' if total != 1 else ''}" if needed == total
                 else f"apply gets {needed} argument{'s' if needed != 1 else ''}")
        returns = ("backward may return nothing" if falls_off
                   else f"backward returns {got} value{'s' if got != 1 else ''}")
        expected, counted = self._torch_counts(function, needed, got)
        return (f"{returns} but {given} (torch: expected {expected}, got {counted}); "
                "return a gradient or None per input")

    def _more(self, function: AutogradFunction, got: int, total: int, counted: Counted) -> str:
        position = next(i for i in range(total, got) if not counted[i]) + 1
        if function.style == "custom_op":
            # torch names the first extra one; it counts from 0 after its internal input, so its
            # position is the value's own (measured on torch 2.13: `return g, g, g` for 2 inputs, "position 3")
            raised = f"torch: a gradient at position {position}"
        else:
            raised = "torch: expected {}, got {}".format(*self._torch_counts(function, total, got))
        return (f"backward returns {got} values for {total} input{'s' if total != 1 else ''} and value {position} "
                f"is not None ({raised}); make the extra values None")

    @staticmethod
    def _torch_counts(function: AutogradFunction, expected: int, got: int) -> tuple[int, int]:
        """The counts torch's error gives: a custom_op's generated node counts one extra internal input."""
        if function.style == "custom_op":
            return expected + 1, got + 1
        return expected, got
