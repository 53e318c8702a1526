from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import AutogradFunction, FileModel, backward_return_counts
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


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
unconditional one (dead code), and forwards taking `*args`/`**kwargs` are skipped, and so is a
Function whose every output is marked non-differentiable (or is an integer tensor): its outputs
have no `grad_fn`, so torch never calls its backward (measured on torch 2.13).

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
        for counts in backward_return_counts(model):
            function, total = counts.function, counts.inputs
            for end in counts.returns:
                got = len(end.nones)
                if got < counts.needed:
                    yield Hit(end.node, self._fewer(function, got, total, counts.needed, end.falls_off),
                              subject=function.name)
                elif got > total and not all(end.nones[total:]):
                    yield Hit(end.node, self._more(function, got, total, end.nones), subject=function.name)

    def _fewer(self, function: AutogradFunction, got: int, total: int, needed: int, falls_off: bool) -> str:
        given = (f"forward takes {total} input{'s' if total != 1 else ''}" if needed == total
                 else f"apply gets {needed} argument{'s' if needed != 1 else ''}")
        returns = ("backward may return nothing" if falls_off
                   else f"backward returns {got} value{'s' if got != 1 else ''}")
        expected, counted = self._torch_counts(function, needed, got)
        return (f"{returns} but {given} (torch: expected {expected}, got {counted}); "
                "return a gradient or None per input")

    def _more(self, function: AutogradFunction, got: int, total: int, counted: tuple[bool, ...]) -> str:
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
