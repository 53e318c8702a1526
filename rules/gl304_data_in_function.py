from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, tensor_data_uses
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule

_WALKED = frozenset({"forward", "setup_context", "backward"})

_WHY = ("`.data` returns a tensor that shares the storage but not the version counter, so autograd cannot see "
        "in-place changes made through it and gradients can be silently wrong (measured, torch 2.13: a tensor "
        "another op had saved, changed through `.data`, gave a wrong gradient with no error; the same change "
        "through `.detach()` raised `RuntimeError: one of the variables needed for gradient computation has been "
        "modified by an inplace operation`)")
_WHAT = {"read": "`{shown}`", "assigned": "assigning `{shown}`", "updated": "updating `{shown}`"}


class DataInFunction(Rule):
    code = "GL304"
    name = "data-in-function"
    severity = Severity.WARNING
    summary = "tensor.data read or written inside an autograd Function: in-place changes escape version checks"
    markers = (("autograd", ".data"), ("register_autograd", ".data"))
    doc = f"""
## What it does
Flags `.data` read or assigned on a tensor inside a custom autograd Function's `forward`,
`setup_context` or `backward` (classes and `torch.library.custom_op` with `register_autograd`):
`x.data`, `ctx.weight.data`, `out.data.copy_(...)`, `grad.data = ...`. The value must be a tensor
as far as the analysis can tell: a forward input used as one (`.data` itself does not count), what
`ctx.saved_tensors` gives, a tensor kept on ctx in forward, the result of a torch op, or an incoming
gradient in backward. `batch.data` on an unknown object, and `.data` outside Functions, are not
reported; nor are uses that only read metadata or copy (`x.data.shape`, `x.data.size()`,
`x.data.clone()`, `x.data.cpu().numpy()`).

## Why is this bad?
{_WHY}. Assigning `x.data = y` also swaps the storage without a version bump
(measured: a forward input that another op had saved, replaced through `x.data = ...`, gave a
wrong gradient with no error).
Inside a Function this hides exactly the bugs autograd's version check exists to catch: a saved
input or output changed in place before backward runs.

## Example
```python
@staticmethod
def forward(ctx, x, weight):
    weight.data.clamp_(-1.0, 1.0)
    ctx.save_for_backward(x, weight)
    return x @ weight
```

## Use instead
```python
@staticmethod
def forward(ctx, x, weight):
    with torch.no_grad():
        weight.clamp_(-1.0, 1.0)  # or weight.detach().clamp_(-1.0, 1.0)
    ctx.save_for_backward(x, weight)
    return x @ weight
```
"""
    VALID = (
        """
import torch
class Normalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, batch):
        ctx.num_graphs = batch.data.num_graphs
        rows = x.data.shape[0]
        norm = x.detach().norm(dim=-1, keepdim=True).clamp_min(1e-6)
        stats = x.data.cpu().numpy()
        ctx.save_for_backward(x, norm)
        return x / norm
    @staticmethod
    def backward(ctx, grad):
        x, norm = ctx.saved_tensors
        copy = grad.data.clone()
        return copy / norm, None
""",
        """
import torch
class Trainer:
    def step(self, model, batch):
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.1)
        return batch.data
class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cache):
        ctx.cache = cache
        cache.data = x.size(0)
        return x.clone()
    @staticmethod
    def backward(ctx, grad):
        return grad, None
""",
    )
    INVALID = (
        Invalid("""
import torch
class ClippedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        weight.data.clamp_(-1.0, 1.0)
        ctx.save_for_backward(x, weight)
        return x @ weight
    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad.data.mul_(0.5)
        return grad @ weight.t(), x.t() @ grad
""", ("weight.data.clamp_(-1.0, 1.0)", "grad.data.mul_(0.5)")),
        Invalid("""
import torch
class Renorm(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        out = x * scale
        out.data = out.data / out.norm()
        return out
    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.scale = scale
        ctx.save_for_backward(output.data)
    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        ctx.scale.data.fill_(1.0)
        return grad * out, None
""", ("out.data = out.data / out.norm()", "ctx.save_for_backward(output.data)", "ctx.scale.data.fill_(1.0)")),
    )

    def precheck(self, tree) -> bool:
        """A Function and a `.data` in a def the check walks: a method named forward,
        setup_context or backward (inherited ones are defs of the file too), or with
        register_autograd in the file, any def (a custom op's functions have any name)."""
        if not prechecks.has_autograd_function(tree):
            return False
        any_def = prechecks.mentions_register_autograd(tree)
        return prechecks.reads_attribute_in_defs(tree, "data", None if any_def else _WALKED)

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for use in tensor_data_uses(model):
            if id(use.statement) in reported or use.copy_or_metadata:
                continue
            reported.add(id(use.statement))  # `out.data = out.data / n` is one finding
            what = _WHAT[use.access].format(shown=use.shown)
            yield Hit(use.node, (
                f"{what} in {use.function}.{use.method} skips autograd's version check: silently wrong gradients; "
                "use .detach()"), subject=f"{use.function}.{use.method}")
