from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, inplace_input_writes, inputs_without_gradient, methods_of_functions
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


class InplaceInputWithoutMarkDirty(Rule):
    code = "GL204"
    name = "inplace-input-without-mark-dirty"
    severity = Severity.ERROR
    summary = "a forward input changed in place without ctx.mark_dirty: no error, silently wrong gradients"
    markers = (("autograd", "def forward"),)
    doc = """
## What it does
Flags an in-place change to a forward input of an autograd Function (`x.add_(...)`, any in-place
tensor method, `x[...] = v`, `x += v`, `torch.relu_(x)`, `F.relu(x, inplace=True)`,
`torch.add(a, b, out=x)`, a Triton kernel of the file launched on it that stores through that
pointer (`tl.store(x_ptr + offs, v)`) or a cuTile kernel launched on it with `ct.launch` that
writes into it (`ct.store(X, ...)`, `ct.scatter(X, ...)`), also through an alias or a view such as `x[:, :3]`,
`x.view(-1)` or `x.contiguous()`, which is `x` itself when `x` is contiguous already)
when forward does not call `ctx.mark_dirty(x)` (for a `setup_context`-style Function: when
`setup_context` does not). The change may be made by a def forward hands the input to (nested in
forward, of the same file, or imported from another module of the project, followed three calls
deep) that changes that parameter so: `tensor_clamp_(x, lo, hi)` doing
`torch.min(x, hi, out=x)`; the message names the def and, for another module's, where it is.

Not reported: an input rebound before the change (`x = x.clone()`), an input that is rebound on
some path before it, a parameter with no evidence that it is a tensor, an input for which every
`return` of backward gives `None` (an index, a running statistic or an output buffer, updated in
place on purpose), and in-place changes of metadata or autograd state only (`requires_grad_()`,
`detach_()`, `unsqueeze_()`, ...).

## Why is this bad?
Measured on torch 2.13: forward runs with grad mode off, so the change raises nothing and warns
nothing, even on a leaf that requires grad (outside forward the same call raises `a leaf Variable
that requires grad is being used in an in-place operation.`): the caller's tensor is silently
changed. Autograd still holds the input's old history, so:
- code that uses the input after the call gets silently wrong gradients: with `x = a * 1` and
  forward doing `x.mul_(2)` and returning `x`, `(out + x).sum().backward()` gives `a.grad == 3`
  where the values computed need 4 (4 with `mark_dirty`);
- if an op before the call saved the input, backward fails with `one of the variables needed for
  gradient computation has been modified by an inplace operation: [torch.FloatTensor [3]], which
  is output 0 of Mul, is at version 1; expected version 0 instead.`

`ctx.mark_dirty(x)` in forward (in `setup_context` for that style), with `x` returned, makes
autograd move `x`'s history onto the Function's node. On a leaf that requires grad torch then
refuses the change (`a leaf Variable that requires grad has been used in an in-place
operation.`): work on a clone when the input can be a leaf.

## Example
```python
class ScaleInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.mul_(scale)
```

## Use instead
```python
class ScaleInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        ctx.mark_dirty(x)
        return x.mul_(scale)
```
"""
    VALID = (
        """
import torch
class ClampInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, lo, hi, inplace=False):
        ctx.lo, ctx.hi = lo, hi
        if inplace:
            ctx.mark_dirty(input)
            output = input.clamp_(lo, hi)
        else:
            output = input.clamp(lo, hi)
        return output
    @staticmethod
    def backward(ctx, g):
        return g, None, None, None
""",
        """
import torch
class Normalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps):
        x = x.clone()
        x.sub_(x.mean(0))
        x /= x.std(0) + eps
        y = torch.empty_like(x)
        torch.mul(x, 2, out=y)
        y[y < 0] = 0
        x.requires_grad_()
        return y
    @staticmethod
    def backward(ctx, g):
        return g, None
""",
        """
import torch
class Accumulate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, out, running_count):
        out.index_add_(0, index, src)
        running_count += torch.bincount(index, minlength=out.size(0))
        ctx.save_for_backward(index)
        return out.clone()
    @staticmethod
    def backward(ctx, g):
        index, = ctx.saved_tensors
        return g.index_select(0, index), None, None, None
""",
        """
import torch
class Centered(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xyz, training):
        if training:
            xyz = xyz.clone()
        xyz.sub_(xyz.mean(1, keepdim=True))
        steps = 0
        steps += 1
        return xyz
    @staticmethod
    def backward(ctx, g):
        return g, None
""",
        """
import torch
class Stash(torch.autograd.Function):
    @staticmethod
    def forward(x, buf):
        buf.copy_(x)
        x.add_(1)
        return x
    @staticmethod
    def setup_context(ctx, inputs, output):
        x, buf = inputs
        ctx.mark_dirty(x)
    @staticmethod
    def backward(ctx, g):
        return g, None
""",
        """
import torch
class Blend(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, names, weight):
        names[0] = "x"
        weight *= 0.5
        ctx.weight = float(weight)
        return x * weight
    @staticmethod
    def backward(ctx, g):
        return (g * ctx.weight,) + (None,) * 2
""",
    )
    INVALID = (
        # A cuTile kernel of the file writes into the array it is launched with (liger's cuTile
        # RoPE rotates q and k in place through ct.launch).
        Invalid("""
import cuda.tile as ct
import torch
@ct.kernel
def _rope_kernel(Q, COS, TILE: ct.Constant[int]):
    row = ct.bid(0)
    q = ct.load(Q, index=(row, 0), shape=(1, TILE))
    ct.store(Q, index=(row, 0), tile=q * ct.load(COS, index=(row, 0), shape=(1, TILE)))
class Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, cos):
        ct.launch(torch.cuda.current_stream(), (q.shape[0],), _rope_kernel, (q, cos, q.shape[1]))
        ctx.save_for_backward(cos)
        return q
    @staticmethod
    def backward(ctx, dq):
        (cos,) = ctx.saved_tensors
        return dq * cos, None
""", ("ct.launch(torch.cuda.current_stream(), (q.shape[0],), _rope_kernel, (q, cos, q.shape[1]))",)),
        # `.contiguous()` of a contiguous tensor is the tensor itself: sub_ changes the input.
        Invalid("""
import torch
class Centered(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xyz):
        xyz = xyz.contiguous()
        xyz.sub_(xyz.mean(1, keepdim=True))
        return xyz
    @staticmethod
    def backward(ctx, g):
        return g
""", ("xyz.sub_(xyz.mean(1, keepdim=True))",)),
        # A Triton kernel of the file stores through the pointer it is given (liger's M-RoPE).
        Invalid("""
import torch
import triton
import triton.language as tl
@triton.jit
def _rotate(q_ptr, cos_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    q = tl.load(q_ptr + offs, mask=offs < n)
    tl.store(q_ptr + offs, q * tl.load(cos_ptr + offs), mask=offs < n)
def rotate_forward(q, cos):
    q = q.transpose(1, 2).contiguous()
    _rotate[(1,)](q, cos, q.numel(), BLOCK=1024)
    return q.transpose(1, 2)
class Rotate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, cos):
        ctx.save_for_backward(cos)
        return rotate_forward(q, cos)
    @staticmethod
    def backward(ctx, g):
        return g, None
""", ("return rotate_forward(q, cos)",)),
        # A helper of the file changes the input it is handed.
        Invalid("""
import torch
def clamp_(x, lo, hi):
    torch.clamp(x, lo, hi, out=x)
    return x
class ClampSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        return clamp_(x, lo, hi)
    @staticmethod
    def backward(ctx, g):
        return g, None, None
""", ("return clamp_(x, lo, hi)",)),
        Invalid("""
import torch
class MaskedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, valid):
        scores.masked_fill_(~valid, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        ctx.save_for_backward(probs)
        return probs
""", ("scores.masked_fill_(~valid, float(\"-inf\"))",)),
        Invalid("""
import torch
class ScaleInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.mul_(scale)
    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None
""", ("return x.mul_(scale)",)),
        Invalid("""
import torch
import torch.nn.functional as F
class GatedRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gate, bias, mask):
        h = x[:, :3]
        h[gate < 0] = 0
        x.add_(1)
        bias += 1
        F.relu(gate, inplace=True)
        torch.sigmoid(gate, out=gate)
        y = mask.view(-1)
        y.clamp_(min=0)
        ctx.save_for_backward(gate)
        return (x + bias.unsqueeze(0)) * gate * mask
    @staticmethod
    def backward(ctx, g):
        gate, = ctx.saved_tensors
        return g * gate, g, g, g
""", ("h[gate < 0] = 0", "bias += 1", "F.relu(gate, inplace=True)", "y.clamp_(min=0)")),
        Invalid("""
import torch
class Shift(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, offset: torch.Tensor):
        x.add_(offset)
        if offset.numel() > 1:
            offset = offset.clone()
        offset.zero_()
        return x * 1
    @staticmethod
    def setup_context(ctx, inputs, output):
        x, offset = inputs
        ctx.save_for_backward(offset)
    @staticmethod
    def backward(ctx, g):
        return g, g.sum()
""", ("x.add_(offset)",)),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for function, forward in methods_of_functions(model, "forward"):
            found = inplace_input_writes(model, function, forward)
            if not found.writes:
                continue
            # An input backward always answers with None is an index, a running statistic or an
            # output buffer: updated in place on purpose, and mark_dirty is not the fix there.
            skipped = found.may_be_marked_dirty | inputs_without_gradient(function)
            reported: set[str] = set()
            for write in found.writes:
                if write.input in skipped or write.input in reported or not write.on_a_tensor:
                    continue
                reported.add(write.input)  # one mark_dirty (or one clone before the first change) fixes them all
                where = " in setup_context" if found.marked_in == "setup_context" else ""
                if write.helper:  # the def's name and place leave less room for the rest
                    message = (f"input `{write.input}` changed in place by {write.helper} without mark_dirty: "
                               f"wrong gradients; mark it{where} or clone it")
                else:
                    via = f" (via `{write.via}`)" if write.via != write.input else ""
                    message = (f"input `{write.input}` changed in place{via} without ctx.mark_dirty: silently wrong "
                               f"gradients; mark it dirty{where} or clone it")
                yield Hit(write.node, message, subject=f"{function.name}.{write.input}")
