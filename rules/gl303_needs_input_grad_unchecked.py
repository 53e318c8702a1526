from __future__ import annotations

from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint.file_model import AutogradFunction, FileModel, leading_params, returns_in
from gradlint.findings import Severity
from gradlint.prescan import descendants
from gradlint.rule import Hit, Invalid, Rule


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


class NeedsInputGradUnchecked(Rule):
    code = "GL303"
    name = "needs-input-grad-unchecked"
    severity = Severity.NOTE
    default_enabled = False
    summary = "backward computes gradients for 2+ inputs without checking ctx.needs_input_grad"
    markers = (("autograd", "def backward"), "register_autograd")
    doc = """
## What it does
Flags a custom autograd Function's `backward` (a Function subclass, or a backward given to
`register_autograd`) that returns a computed gradient for two or more inputs and never reads
`ctx.needs_input_grad` in any form (`ctx.needs_input_grad[0]`, `gx, gw = ctx.needs_input_grad`,
`any(ctx.needs_input_grad)`), in backward, forward or setup_context. Reported once, on the `def`.

Not reported: backwards that return at most one computed gradient; incoming gradients returned
as they are (`return grad, grad`, `return grad, -grad`); gradients set to `None` somewhere in
backward (computed under a test of their own); backwards that hand `ctx` to a helper, which may
check; returns that are not a tuple literal; gradients that all come from one fused call
(`dx, dw = _ext.backward(...)`, or buffers one kernel fills: `kernel[grid](g, x, dx, dw)`), where
a check could not skip any work. Off by default: enable it with `--select GL303`.

## Why is this bad?
autograd calls backward whenever any input needs a gradient, and each gradient is computed even
when its input does not require one (a frozen weight, an index, data). torch then drops it
silently: measured on torch 2.13, a gradient returned for an input with `requires_grad=False` is
accepted without error and thrown away, while `ctx.needs_input_grad` reads `False` for exactly
that input. With frozen weights or fine-tuning, that is a matmul (and its memory) per layer for
nothing.

## Example
```python
@staticmethod
def backward(ctx, grad_out):
    x, weight = ctx.saved_tensors
    return grad_out @ weight.t(), x.t() @ grad_out
```

## Use instead
```python
@staticmethod
def backward(ctx, grad_out):
    x, weight = ctx.saved_tensors
    grad_x = grad_out @ weight.t() if ctx.needs_input_grad[0] else None
    grad_w = x.t() @ grad_out if ctx.needs_input_grad[1] else None
    return grad_x, grad_w
```
"""
    VALID = (
        # One fused kernel gives every gradient (unpacked, or into buffers it fills).
        """
import torch
class FusedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.t()
    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        dx, dw = _ext.linear_backward(grad, x, weight)
        return dx, dw
class FusedNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w
    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        dx = torch.empty_like(x)
        dw = torch.zeros_like(w)
        _norm_bwd_kernel[(x.shape[0],)](grad, x, w, dx, dw)
        return dx, dw
""",
        """
import torch
class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight
    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad
        return (grad @ weight.t() if need_x else None), (x.t() @ grad if need_w else None)
class Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a + b
    @staticmethod
    def backward(ctx, grad):
        return grad, -grad
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor
    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None
""",
        """
import torch
def _linear_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    return grad @ weight.t(), x.t() @ grad
class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        ctx.weight_frozen = not weight.requires_grad
        return x @ weight
    @staticmethod
    def backward(ctx, grad):
        return _linear_backward(ctx, grad)
class Bilinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, weight):
        ctx.save_for_backward(x, y, weight)
        ctx.weight_frozen = not weight.requires_grad
        return torch.einsum("bi,ij,bj->b", x, weight, y)
    @staticmethod
    def backward(ctx, grad):
        x, y, weight = ctx.saved_tensors
        grad_w = None
        if not ctx.weight_frozen:
            grad_w = torch.einsum("b,bi,bj->ij", grad, x, y)
        grad_x = grad[:, None] * (y @ weight.t())
        grad_y = grad[:, None] * (x @ weight)
        return grad_x, grad_y, grad_w
""",
        """
import torch
class Gate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w
    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        if not any(ctx.needs_input_grad):
            return None, None
        return grad * w, grad * x
""",
    )
    INVALID = (
        Invalid("""
import torch
class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x @ weight.t() + bias
    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x = grad_out @ weight
        grad_w = grad_out.t() @ x
        return grad_x, grad_w, grad_out.sum(0)
""", ("def backward(ctx, grad_out):",)),
        Invalid("""
import torch
@torch.library.custom_op("gl::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return x * scale + shift
def setup_context(ctx, inputs, output):
    x, scale, shift = inputs
    ctx.save_for_backward(x, scale)
def scale_shift_backward(ctx, grad):
    x, scale = ctx.saved_tensors
    if grad.dtype == torch.float16:
        return (grad * scale).half(), (grad * x).sum(0).half(), grad.sum(0)
    return grad * scale, (grad * x).sum(0), grad.sum(0)
scale_shift.register_autograd(scale_shift_backward, setup_context=setup_context)
""", ("def scale_shift_backward(ctx, grad):",)),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for function, backward in model.distinct_methods("backward"):
            if self._reads_needs_input_grad(model, function):
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
                    yield Hit(backward.name, (
                        f"backward computes {most} gradients without reading ctx.needs_input_grad; return None "
                        "where it is False"),
                        subject=f"{function.name}.backward")

    @staticmethod
    def _reads_needs_input_grad(model: FileModel, function: AutogradFunction) -> bool:
        # Any mention counts: an index, an unpacking, any(...), or a flag forward stashed on ctx.
        for method in (function.backward, function.forward, function.setup_context):
            if method is not None and "needs_input_grad" in model.module.code_for_node(method):
                return True
        return False
