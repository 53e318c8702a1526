from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, int64_index_saves
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule

# The message; the measured why (bytes, the int32 kernel's speed) is _WHY, in the doc.
_MESSAGE = "an int64 index: twice int32's memory until backward; use int32 if the backward kernel takes it"
_WHY = ("saves an int64 index for backward: 8 bytes per element where int32 takes 4 "
        "(1e6 indices hold 8,000,000 B instead of 4,000,000 B until backward, measured). int32 needs "
        "a kernel that accepts it: torch's own index_add_ runs 1.4-2.1x slower on CPU with an int32 "
        "index (measured), gradlint.cuda_ext.scatter_add takes int32 natively")


class Int64IndexSaved(Rule):
    code = "GL301"
    name = "int64-index-saved"
    severity = Severity.NOTE
    summary = "an int64 index tensor saved for backward (twice the memory of int32)"
    markers = (("autograd", "def forward"), "register_autograd")
    doc = f"""
## What it does
Flags an index tensor that is certainly int64 (`.long()`, `.to(torch.int64)`,
`dtype=torch.long`, `argsort`, `argmax`, `topk(...).indices`, `sort(...).indices`, `nonzero`,
`randint` below int32's range, `arange` with integer arguments, or a tensor forward hands to a
def of the file that declares the parameter `torch.LongTensor`) saved for backward with
`ctx.save_for_backward` or kept on a ctx attribute. An index that arrives as a forward input is reported only when the file
pins it to int64: forward (or a def of the file forward passes it to) checks it (`assert index.dtype == torch.long`, a check call such as
`torch._check(index.dtype == torch.int64)`, `if index.dtype != torch.long: raise ...`), annotates
it `torch.LongTensor`, or every call of the Function's apply in the file (by `Fn.apply` or a
name bound to it, `index_first_axis = IndexFirstAxis.apply`) passes one made int64 (`.long()`,
`dtype=torch.long`), checked to be, or that the caller's own code makes int64 (`indices =
torch.nonzero(mask).flatten()`). Otherwise its dtype is unknown statically.

## Why is this bad?
It {_WHY}. For graph and point-cloud ops the index is often the largest tensor a layer keeps
(E edges x 8 bytes per layer, alive until backward).

## Example
```python
order = score.argsort(dim=0)
ctx.save_for_backward(order)
```

## Use instead
```python
order = score.argsort(dim=0).to(torch.int32)  # when the backward kernel accepts int32
ctx.save_for_backward(order)
```
"""
    VALID = (
        """
import torch
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, idx):
        order = x.argsort().int()
        nbr = torch.arange(0, 10, dtype=torch.int32)
        ctx.save_for_backward(idx, order, nbr)
        return x[idx]
""",
        # Dropout seeds and RNG offsets drawn up to 2**32: their values need int64.
        """
import torch
class DropoutLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        seeds = torch.randint(2**32, (x.shape[0],), device=x.device, dtype=torch.int64)
        offset = torch.randint(0, 1 << 32, (1,), dtype=torch.int64)
        ctx.save_for_backward(x, weight, seeds, offset)
        return x * weight
""",
    )
    INVALID = (
        # A helper of the file that forward calls raises unless the target is int64 (liger's
        # _validate_inputs): the index saved for backward is int64 for certain.
        Invalid("""
import torch
def _validate_inputs(x, target):
    if target.dtype != torch.int64:
        raise TypeError("target must be an int64 tensor")
class ScaledCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, target):
        _validate_inputs(x, target)
        lse = torch.logsumexp(x, dim=-1)
        ctx.save_for_backward(x, target, lse)
        return (lse - x.gather(1, target[:, None]).squeeze(1)).mean()
    @staticmethod
    def backward(ctx, grad):
        x, target, lse = ctx.saved_tensors
        return grad * (torch.softmax(x, -1) - torch.nn.functional.one_hot(target, x.shape[-1])) / x.shape[0], None
""", ("ctx.save_for_backward(x, target, lse)",)),
        # Every caller passes an index its own code makes int64, through an alias of apply.
        Invalid("""
import torch
class IndexFirstAxis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, indices):
        ctx.save_for_backward(indices)
        return input[indices]
    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        grad = grad_output.new_zeros(ctx.rows, *grad_output.shape[1:])
        return grad.index_copy(0, indices, grad_output), None
index_first_axis = IndexFirstAxis.apply
def unpad_input(hidden_states, attention_mask):
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    return index_first_axis(hidden_states.flatten(0, 1), indices), indices
""", ("ctx.save_for_backward(indices)",)),
        # A def of the file declares what it takes: `token_indices: torch.LongTensor`.
        Invalid("""
import torch
def nsa_fwd(q, token_indices: torch.LongTensor | None = None):
    return q
class NSA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, cu_seqlens):
        token_indices = torch.repeat_interleave(cu_seqlens.diff()).to(cu_seqlens)
        o = nsa_fwd(q, token_indices=token_indices)
        ctx.token_indices = token_indices
        return o
""", ("ctx.token_indices = token_indices",)),
        # Inputs pinned to int64: by forward's own assert, by the one caller's check.
        Invalid("""
import torch
class Segment(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index):
        assert index.dtype == torch.long
        ctx.save_for_backward(index)
        return src.new_zeros(10, src.size(1)).index_add_(0, index, src)
class Focal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pred, target):
        ctx.save_for_backward(pred, target)
        return pred.log_softmax(1).gather(1, target[:, None])
def focal_loss(pred, target):
    if target.dtype != torch.int64:
        raise TypeError("labels must be int64")
    return Focal.apply(pred, target)
""", ("ctx.save_for_backward(index)", "ctx.save_for_backward(pred, target)")),
        Invalid("""
import torch
class TopK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        values, indices = x.topk(k)
        order = torch.argsort(x)
        ctx.save_for_backward(indices, order)
        ctx.perm = torch.randint(0, 10, (5,))
        return values
""", ("ctx.save_for_backward(indices, order)", "ctx.perm =")),
        Invalid("""
import torch as th
class Knn(th.autograd.Function):
    @staticmethod
    def forward(ctx, pos):
        nbr = th.cdist(pos, pos).topk(8, largest=False).indices
        rows = th.arange(pos.shape[0]).repeat_interleave(8)
        ctx.save_for_backward(pos, nbr.long())
        ctx.save_for_backward(pos, rows)
        return nbr
""", ("ctx.save_for_backward(pos, nbr.long())", "ctx.save_for_backward(pos, rows)")),
        # The method form on an input nothing else types: argsort gives int64 on a NumPy array too,
        # and what save_for_backward takes is a tensor.
        Invalid("""
import torch
class SortPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, score, k):
        order = score.argsort(dim=-1, descending=True)[..., :k]
        ctx.save_for_backward(order)
        return score.gather(-1, order)
""", ("ctx.save_for_backward(order)",)),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for save in int64_index_saves(model):
            if save.ctx_attribute is None:
                yield Hit(save.node, f"save_for_backward gets {_MESSAGE}", subject=save.function)
            else:
                yield Hit(save.node, f"{save.shown} holds {_MESSAGE}",
                          subject=f"{save.function}.ctx.{save.ctx_attribute}")
