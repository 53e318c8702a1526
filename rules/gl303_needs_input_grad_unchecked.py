from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, unchecked_backwards
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


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
        for backward in unchecked_backwards(model):
            yield Hit(backward.node, (
                f"backward computes {backward.computed} gradients without reading ctx.needs_input_grad; "
                "return None where it is False"), subject=f"{backward.function}.backward")
