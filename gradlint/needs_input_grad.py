"""Backwards that compute every gradient whether or not the input needs one.

One question, `unchecked_backwards(model)`: each backward that never reads
`ctx.needs_input_grad` (nor does forward or setup_context stash it) yet returns, on some path, two
or more gradients it computes (not None, not an incoming gradient passed through), unless one fused
call makes them all, ctx is handed to a helper, or the gradients are computed under tests of their
own (`grad_w = None` first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from gradlint.file_model import AutogradFunction, FileModel, leading_params, returns_in
from gradlint.prescan import descendants


@dataclass(frozen=True)
class UncheckedBackward:
    """A backward that computes every gradient without asking which inputs need one."""

    node: cst.Name  # the backward's name in its def
    function: str  # the Function's name
    computed: int  # the most gradients one return computes


def unchecked_backwards(model: FileModel) -> list[UncheckedBackward]:
    """Each backward once, in file order."""
    found = []
    for function, backward in model.distinct_methods("backward"):
        if _reads_needs_input_grad(model, function):
            continue
        body = _Backward(backward)
        if body.ctx is None or body.ctx_passed:
            continue
        most = 0
        for statement in returns_in(backward):
            values = _returned(statement.value)
            if values is None:
                continue
            if any(isinstance(v, cst.Name) and v.value in body.none_names for v in values):
                break  # gradients computed under a test of their own
            if body.fused(values):
                continue  # one fused kernel computes them all
            most = max(most, sum(body.computed(v) for v in values))
        else:
            if most >= 2:
                found.append(UncheckedBackward(backward.name, function.name, most))
    return found


def _reads_needs_input_grad(model: FileModel, function: AutogradFunction) -> bool:
    # Any mention counts: an index, an unpacking, any(...), or a flag forward stashed on ctx.
    for method in (function.backward, function.forward, function.setup_context):
        if method is not None and "needs_input_grad" in model.module.code_for_node(method):
            return True
    return False


def _nodes(function: cst.FunctionDef) -> Iterator[cst.CSTNode]:
    """Every node of the body, nested functions and lambdas included (a closure may check too)."""
    return descendants(function.body)


def _returned(expr: cst.BaseExpression | None) -> list[cst.BaseExpression] | None:
    """The values a `return` gives when it is a tuple literal (or a sum of them)."""
    if isinstance(expr, cst.Tuple):
        if any(isinstance(e, cst.StarredElement) for e in expr.elements):
            return None
        return [e.value for e in expr.elements]
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        left, right = _returned(expr.left), _returned(expr.right)
        return left + right if left is not None and right is not None else None
    return None


class _Backward:
    """What the check needs to know about one backward body."""

    def __init__(self, backward: cst.FunctionDef):
        params = [p.name.value for p in backward.params.params][leading_params(backward):]
        self.ctx = params[0] if params else None
        self.passthrough = set(params[1:])  # the incoming gradients, returned as they are
        self.ctx_passed = False  # ctx handed to a helper, which may read needs_input_grad
        self.none_names: set[str] = set()
        assigned: dict[str, list[cst.BaseExpression]] = {}
        # One fused call makes them all: `dx, dw = _C.linear_backward(...)`, or buffers
        # (`dx = torch.empty_like(x)`) it is handed to fill (`kernel[grid](g, x, w, dx, dw)`).
        self.made_by: dict[str, int] = {}
        self.buffers: set[str] = set()
        self.filled_by: dict[str, set[int]] = {}
        for node in _nodes(backward):
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    if isinstance(target.target, cst.Name):
                        assigned.setdefault(target.target.value, []).append(node.value)
                        if isinstance(node.value, cst.Call) and _allocates(node.value):
                            self.buffers.add(target.target.value)
                    elif isinstance(target.target, (cst.Tuple, cst.List)) and isinstance(node.value, cst.Call):
                        for element in target.target.elements:
                            if isinstance(element.value, cst.Name):
                                self.made_by[element.value.value] = id(node.value)
            elif isinstance(node, cst.Call):
                self.ctx_passed = self.ctx_passed or any(
                    isinstance(arg.value, cst.Name) and arg.value.value == self.ctx for arg in node.args)
                for arg in node.args:
                    if isinstance(arg.value, cst.Name):
                        self.filled_by.setdefault(arg.value.value, set()).add(id(node))
        for name, values in assigned.items():
            if any(_is_none(v) for v in values):
                self.none_names.add(name)  # `grad_w = None` then computed under some other test
            elif all(isinstance(v, cst.Name) and v.value in self.passthrough for v in values):
                self.passthrough.add(name)

    def fused(self, values: list[cst.BaseExpression]) -> bool:
        """Whether every computed gradient comes from one call: checking needs_input_grad could not
        skip any of the work, only ask the kernel for less."""
        names = [v.value for v in values if self.computed(v) and isinstance(v, cst.Name)]
        if len(names) < 2 or len(names) != sum(self.computed(v) for v in values):
            return False
        makers = {self.made_by.get(n) for n in names}
        if None not in makers and len(makers) == 1:
            return True
        if all(n in self.buffers for n in names):
            common = set.intersection(*(self.filled_by.get(n, set()) for n in names))
            return bool(common)
        return False

    def computed(self, expr: cst.BaseExpression) -> bool:
        """A gradient backward works for: not None, not an incoming gradient passed through (or negated)."""
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            expr = expr.expression
        return not _is_none(expr) and not (isinstance(expr, cst.Name) and expr.value in self.passthrough)


_ALLOCATING = frozenset({"empty", "zeros", "empty_like", "zeros_like", "new_empty", "new_zeros"})


def _allocates(call: cst.Call) -> bool:
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return name in _ALLOCATING


def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"
