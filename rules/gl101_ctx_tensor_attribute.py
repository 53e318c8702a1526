from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.file_model import FileModel
from gradlint.findings import Severity
from gradlint.flow import AttributeStore, Walk
from gradlint.rule import Hit, Invalid, Rule
from gradlint.values import Kind, Val


def stored_kind(walk: Walk, value: Val) -> str | None:
    """What a ctx attribute holds: output, view (of the output), container (of the output),
    tensor (an input or intermediate), or None (not a tensor, or unknown)."""
    if value.kind not in (Kind.TENSOR, Kind.CONTAINER):
        return None
    if walk.is_output(value):
        return "output"
    if walk.is_view_of_output(value):
        return "view"
    if value.kind is Kind.CONTAINER:
        inner = [stored_kind(walk, m) for m in value.members()]
        if "view" in inner:
            return "view"
        if "output" in inner or "container" in inner:
            return "container"
        return "tensor" if "tensor" in inner else None
    return "tensor" if value.is_tensor else None


class CtxTensorAttribute(Rule):
    code = "GL101"
    name = "ctx-tensor-attribute"
    severity = Severity.ERROR
    summary = "a tensor kept as a ctx attribute instead of ctx.save_for_backward"
    markers = (("autograd", "def forward"), "register_autograd")
    doc = """
## What it does
Flags a tensor stored as an attribute of `ctx` in an autograd Function's `forward` or
`setup_context` (also through `setattr(ctx, ...)`, tuple targets, containers, and helpers or
closures that receive ctx).

## Why is this bad?
What torch 2.13 does, measured:
- The Function's **own output** (or a list holding it) on ctx forms a reference cycle
  output -> grad_fn -> ctx -> output. Only Python's cyclic collector frees it: in a lean training
  loop outputs lived a median of 42 steps (max 94) before a collection, and every other ctx
  attribute stays alive with them. On a GPU that is an OOM waiting to happen.
- A **view or slice of the output** (`ctx.v = out[1:]`) forms a cycle the collector never frees:
  a permanent leak, even with `gc.collect()`.
- An **input or intermediate** on ctx skips autograd's version-counter check (modify it in
  place after forward and backward silently computes wrong gradients), and it stays alive after
  backward for as long as the graph is referenced; `save_for_backward` frees it in backward.

Python scalars, shapes, dtypes and bools on ctx are fine and never reported.

## Example
```python
class ScatterSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, dim_size):
        out = src.new_zeros(dim_size, src.size(1)).index_add_(0, index, src)
        ctx.index = index
        ctx.out = out
        return out
```

## Use instead
```python
class ScatterSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, dim_size):
        out = src.new_zeros(dim_size, src.size(1)).index_add_(0, index, src)
        ctx.save_for_backward(index, out)
        ctx.dim_size = dim_size
        return out
```
"""
    VALID = (
        """
import torch
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, idx, dim=0):
        out = x.index_select(dim, idx)
        ctx.save_for_backward(idx)
        ctx.dim = dim
        ctx.shape = x.shape
        ctx.n = x.size(0)
        ctx.dtype = x.dtype
        ctx.flag = True
        return out
""",
        """
import torch as th
class Sig(th.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        out = th.sigmoid(x).topk(k).values
        ctx.k = k
        ctx.detached = out.shape
        ctx.save_for_backward(out)
        return out
""",
        """
class NotAutograd:
    def forward(self, x):
        self.cache = x * 2
        return self.cache
""",
    )
    INVALID = (
        Invalid("""
import torch
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.out = out
        return out
""", ("ctx.out = out",)),
        Invalid("""
import torch
class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x * x
        ctx.out = out
        ctx.x = x
        return out
""", ("ctx.out = out",)),
        Invalid("""
from torch.autograd import Function as F
class Exp(F):
    @staticmethod
    def forward(context, x):
        y = x.exp()
        context.tail = y[1:]
        context.inp = x
        return y
""", ("context.tail = y[1:]", "context.inp = x")),
        Invalid("""
import torch
import torch.autograd.function
class Base(torch.autograd.function.Function):
    pass
class Mul(Base):
    @staticmethod
    def forward(ctx, a, b):
        out = torch.mul(a, b)
        ctx.a, ctx.b = a, b
        setattr(ctx, "keep", [out])
        return out
""", ("ctx.a, ctx.b = a, b", 'setattr(ctx, "keep", [out])')),
        Invalid("""
import torch
def _stash(ctx, t):
    ctx.t = t
class Relu(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.clamp(min=0)
    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.output = output
        _stash(ctx, x)
""", ("ctx.output = output", "ctx.t = t")),
        Invalid("""
import torch
@torch.library.custom_op("demo::sq", mutates_args=())
def sq(x: torch.Tensor) -> torch.Tensor:
    return x * x
def setup(ctx, inputs, output):
    ctx.out = output
def bwd(ctx, g):
    return g * 2
sq.register_autograd(bwd, setup_context=setup)
""", ("ctx.out = output",)),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for function, walk in model.autograd_walks:
            for store in walk.of(AttributeStore):
                if store.owner.kind is not Kind.CTX:
                    continue
                kind = stored_kind(walk, store.value)
                if kind is None:
                    continue
                attr = f"{store.owner_name}.{store.attribute}"
                subject = f"{function.name}.ctx.{store.attribute}"
                if kind == "view":
                    yield Hit(store.node, (
                        f"{attr} holds a view of {function.name}'s own output: a reference cycle "
                        "(output -> grad_fn -> ctx -> view -> output) that the cyclic collector never frees, "
                        "a permanent leak every call (measured, torch 2.13); save the output with "
                        "ctx.save_for_backward(...) and slice it in backward"), Severity.ERROR, subject)
                elif kind in ("output", "container"):
                    what = "its own output" if kind == "output" else "a container holding its own output"
                    yield Hit(store.node, (
                        f"{attr} holds {what}: a reference cycle (output -> grad_fn -> ctx -> output) "
                        "that only Python's cyclic collector frees, so outputs pile up between collections "
                        "(median 42 steps in a training loop, measured); use ctx.save_for_backward(...)"),
                        Severity.ERROR, subject)
                else:
                    yield Hit(store.node, (
                        f"{attr} holds a tensor outside ctx.save_for_backward: autograd's version-counter "
                        "check is skipped (an in-place change gives silently wrong gradients) and the tensor "
                        "stays alive after backward; use ctx.save_for_backward(...)"), Severity.WARNING, subject)
