from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import CONTAINER, OUTPUT, VIEW, FileModel, tensors_kept_on_ctx
from gradlint.findings import Applicability, Severity
from gradlint.rule import FixPlan, Hit, Invalid, Rule


class CtxTensorAttribute(Rule):
    code = "GL101"
    name = "ctx-tensor-attribute"
    severity = Severity.ERROR
    summary = "a tensor kept as a ctx attribute instead of ctx.save_for_backward"
    markers = (("autograd", "def forward"), "register_autograd")
    fix_safety = "safe"
    doc = """
## What it does
Flags a tensor stored as an attribute of `ctx` in an autograd Function's `forward` or
`setup_context` (also through `setattr(ctx, ...)`, tuple targets, containers, and helpers or
closures that receive ctx). A helper in another module of the project given ctx (`stash(ctx, x)`
from `ops/helpers.py`) is reported once at its call, naming its file and line and each attribute
it sets; that finding has no fix (the helper's other callers may rely on it).

## Why is this bad?
What torch 2.13 does, measured:
- The Function's **own output** (or a list holding it) on ctx forms a reference cycle
  output -> grad_fn -> ctx -> output. Only Python's cyclic collector frees it: in a lean training
  loop outputs lived a median of 42 steps (max 94) before a collection, and every other ctx
  attribute stays alive with them. On a GPU that is an OOM waiting to happen.
- A **view or slice of the output** (`ctx.v = out[1:]`) forms a cycle the collector never frees:
  a permanent leak, even with `gc.collect()`.
- **Two or more outputs** of a multi-output Function on ctx (`ctx.a, ctx.b = a, b; return a, b`,
  or a list of them) form cycles through the grad_fn node they share, and the collector frees
  none of them either: 20 of 20 calls' outputs were alive after `gc.collect()`, with or without
  backward, where one output on ctx was always freed.
- An **input or intermediate** on ctx skips autograd's version-counter check (modify it in
  place after forward and backward silently computes wrong gradients), and it stays alive after
  backward for as long as the graph is referenced; `save_for_backward` frees it in backward.

Python scalars, shapes, dtypes and bools on ctx are fine and never reported (`bias is not None`,
`k in cache`, `not x`, `isinstance(...)` are bools whatever `x` is). A forward input counts as a
tensor only when the file shows it is one: forward uses it as only a tensor is used (`w.t()`,
`x.size(1)`, `x.add_(...)`, saved for backward; not `.size()`, `.view()`, `.sum()`, `.to()`,
which a process group, a NumPy array or a module has too), a helper of the file or a Triton kernel
it launches uses it so (`tl.load(ptr + offs)` outside an `if`, or under one that tests only
values the kernel loaded: Triton compiles both its branches), its annotation says so
(`Tensor` and `Optional[Tensor]` yes; `Union[int, Tensor]` no; `List[Tensor]` is a container of
tensors: reported, never fixed), every caller in the file passes a tensor-annotated argument, or
backward uses the attribute as a tensor (`ctx.w.t()`); `isinstance(x, int)` narrows inside its
branch. `x * slope` alone says nothing (a float passes too), nor does `.shape` in backward (a
NumPy array has one). A value that is a tensor or None (`t if cond else None`) counts as a
tensor: save_for_backward takes None. An input known only through `.shape`/`.dtype`/`.device`
is reported but not rewritten by the fix. An input or intermediate on ctx is a warning (a
correctness risk); the Function's own output or a view of it is an error (a leak), unless it is
an integer or non-differentiable output (no grad_fn, no cycle).

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

## Fix safety
Safe: the attribute's value goes into `ctx.save_for_backward(...)` (joining an existing call)
and its reads in backward become a name unpacked from `ctx.saved_tensors`. An in-place change of
the tensor between forward and backward then raises instead of giving wrong gradients: that is
the point. Offered only when every use can be rewritten: the store is a plain statement of
forward (or setup_context), the attribute is read nowhere but backward and named in no string,
an existing call and unpacking are the only ones, side by side in their bodies, and no Function
of the file subclasses this one (its backward would unpack what this forward saves). A value
counts as a tensor where its use proves it or where the project's annotations declare it one
(`Tensor`, `Optional[Tensor]`: save_for_backward takes None); a caller that passes something
else against its own annotation makes the fixed forward raise TypeError on its first call.
"""
    VALID = (
        # A container the annotation names, nothing says of tensors: runtime scalars.
        """
import torch
from typing import Optional
class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, aux_scalars: Optional[tuple] = None):
        aux_scalars = tuple(aux_scalars) if aux_scalars else None
        ctx.save_for_backward(q, k, v)
        ctx.aux_scalars = aux_scalars
        return q @ k.transpose(-1, -2) @ v
""",
        # What a def of the file declares it takes says what is passed to it: an int here (and
        # after a `*rest`, which parameter gets `blocks` is unknown).
        """
import torch
def scale_fwd(x: torch.Tensor, blocks: int = 1) -> torch.Tensor:
    return x * blocks
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, blocks=1):
        out = scale_fwd(x, blocks)
        ctx.blocks = blocks
        return out
    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.blocks, None
class Spread(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, rest, blocks=None):
        out = scale_fwd(*rest, blocks)
        ctx.blocks = blocks
        return out
    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.blocks, None, None
""",
        # `bias is not None`, `k in cache`, `not x`, isinstance(...): Python bools whatever x is;
        # a process group and a work handle have `.size()`, which proves nothing; an annotation says
        # what it says (`Union[int, Tensor]` is either one); isinstance narrows inside its branch.
        """
from typing import Union
import torch
class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, group, handle, scale: Union[float, torch.Tensor], k):
        ctx.has_bias = bias is not None
        ctx.both = bias is None and weight is None
        ctx.cached = k in (1, 2)
        ctx.world = group.size()
        ctx.group, ctx.handle, ctx.scale = group, handle, scale
        if isinstance(k, int):
            ctx.k = k
        y = torch.nn.functional.linear(x, weight, bias)
        ctx.save_for_backward(x, weight)
        return y
""",
        # What backward reads as `.shape`, `.device`, `.dtype`: a NumPy array, a generator, a
        # config have them too.
        """
import numpy as np
import torch
class Shuffle(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, perm, opts, gen):
        ctx.perm, ctx.opts, ctx.gen = perm, opts, gen
        return x[perm]
    @staticmethod
    def backward(ctx, grad):
        inverse = np.argsort(ctx.perm)[: ctx.perm.shape[0]]
        noise = torch.zeros(1, device=ctx.opts.device, dtype=ctx.opts.dtype, generator=None)
        return grad[inverse] + noise, None, None, None
""",
        # A slope only multiplied with a tensor: a float as far as anything shows.
        """
import torch
class LeakyStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, slope):
        ctx.save_for_backward(x)
        ctx.slope = slope
        return torch.where(x > 0, x, x * slope)
    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return torch.where(x > 0, grad, grad * ctx.slope), None
""",
        # Inputs indexed or unpacked into what is no tensor: sizes, strings, NumPy arrays, floats.
        """
import torch
class Pad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, sizes, names, perms, coeffs):
        out = torch.zeros(sizes[0], x.size(1))
        prefix = names[0].split(".")[0]
        inverse = perms[0].argsort()
        a, b = coeffs
        ctx.sizes, ctx.names, ctx.perms, ctx.coeffs = sizes, names, perms, coeffs
        ctx.prefix, ctx.inverse = prefix, inverse
        return out + x * a + b
    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None, None
""",
        # torch's settings and predicates are no tensors, also through a helper of the file
        # (torch.utils.checkpoint keeps its autocast state this way).
        """
import torch
def autocast_state(device):
    return {"enabled": torch.is_autocast_enabled(device), "dtype": torch.get_autocast_dtype(device)}
class Checkpointed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, x):
        ctx.run = run
        ctx.autocast = autocast_state("cpu")
        ctx.save_for_backward(x)
        return run(x)
""",
        # A number passed on to a torch function is no tensor: `save_for_backward(x, slope)` would
        # raise TypeError in forward.
        """
import torch
import torch.nn.functional as F
class LeakyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, slope, qmin, qmax):
        ctx.save_for_backward(x)
        ctx.slope = slope
        ctx.qrange = (qmin, qmax)
        return torch.clamp(F.leaky_relu(x, slope), qmin, qmax)
""",
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
        # A subclass inherits forward and unpacks saved_tensors itself: the fix would break it.
        Invalid("""
import torch
class Entmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        alpha = torch.as_tensor(alpha, dtype=x.dtype)
        y = torch.softmax(x * alpha, -1)
        ctx.alpha = alpha
        ctx.save_for_backward(y)
        return y
    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return grad * y * ctx.alpha, None
class Sparsemax(Entmax):
    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return grad * (y > 0), None
""", ("ctx.alpha = alpha",), fixed="""
import torch
class Entmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        alpha = torch.as_tensor(alpha, dtype=x.dtype)
        y = torch.softmax(x * alpha, -1)
        ctx.alpha = alpha
        ctx.save_for_backward(y)
        return y
    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return grad * y * ctx.alpha, None
class Sparsemax(Entmax):
    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return grad * (y > 0), None
"""),
        # Known only through `.shape` in forward: reported, but the fix would hand a NumPy array
        # to save_for_backward (a TypeError), so none is offered.
        Invalid("""
import torch
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, perm):
        ctx.n = perm.shape[0]
        ctx.perm = perm
        return x[perm]
    @staticmethod
    def backward(ctx, grad):
        return grad[ctx.perm], None
""", ("ctx.perm = perm",), fixed="""
import torch
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, perm):
        ctx.n = perm.shape[0]
        ctx.perm = perm
        return x[perm]
    @staticmethod
    def backward(ctx, grad):
        return grad[ctx.perm], None
"""),
        # Tensors as far as a helper given ctx, or backward, shows: `edge_index.size(1)` there,
        # `ctx.w.t()` here (forward's `x * w` alone would not say).
        Invalid("""
import torch
def _keep_edges(ctx, edge_index):
    ctx.num_edges = edge_index.size(1)
    ctx.edge_index = edge_index
class EdgeScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, edge_index, w):
        _keep_edges(ctx, edge_index)
        ctx.w = w
        return x * w
    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.w, None, (grad * ctx.w.t()).sum()
""", ("    ctx.edge_index = edge_index", "ctx.w = w")),
        # An input known as tensors only through its items (a [2, E] edge index, or a pair of
        # index tensors) or a tuple of tensors: reported, and left alone by the fix, since
        # save_for_backward takes tensors only. What is unpacked from such an input
        # (`counts`, a list of ints) is not assumed to be a tensor.
        Invalid("""
import torch
class GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, edge_index, kmap):
        src = edge_index[0].contiguous()
        ctx.edge_index = edge_index
        in_idx, out_idx, counts = kmap
        ctx.save_for_backward(in_idx, out_idx)
        ctx.counts = counts
        ctx.pair = (x, src)
        return x.index_select(0, src)
    @staticmethod
    def backward(ctx, grad):
        src = ctx.edge_index[0]
        return torch.zeros_like(grad).index_add_(0, src, grad), None, None
""", ("ctx.edge_index = edge_index", "ctx.pair = (x, src)"), fixed="""
import torch
class GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, edge_index, kmap):
        src = edge_index[0].contiguous()
        ctx.edge_index = edge_index
        in_idx, out_idx, counts = kmap
        ctx.save_for_backward(in_idx, out_idx)
        ctx.counts = counts
        ctx.pair = (x, src)
        return x.index_select(0, src)
    @staticmethod
    def backward(ctx, grad):
        src = ctx.edge_index[0]
        return torch.zeros_like(grad).index_add_(0, src, grad), None, None
"""),
        Invalid("""
import torch
class BinaryLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x)
        ctx.weight = weight
        return x @ weight.sign().t()
    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad @ ctx.weight.sign(), grad.t() @ x
""", ("ctx.weight = weight",)),
        Invalid("""
import torch
def scale_fwd(x: torch.Tensor, offsets: torch.Tensor | None = None) -> torch.Tensor:
    return x * 2
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, offsets=None):
        out = scale_fwd(x, offsets)
        ctx.offsets = offsets
        return out
    @staticmethod
    def backward(ctx, grad):
        return grad * 2, None
""", ("ctx.offsets = offsets",)),
        Invalid("""
import torch
class VarlenScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cu_seqlens):
        if isinstance(cu_seqlens, tuple):
            cu_q, cu_k = cu_seqlens
        else:
            cu_q = cu_k = cu_seqlens
        ctx.save_for_backward(x)
        ctx.cu_seqlens = cu_q
        return x * 2
    @staticmethod
    def backward(ctx, grad):
        return grad * 2, None
def varlen_scale(x: torch.Tensor, cu_seqlens: torch.Tensor | tuple[torch.Tensor, torch.Tensor]):
    return VarlenScale.apply(x, cu_seqlens)
""", ("ctx.cu_seqlens = cu_q",)),
        Invalid("""
import torch
class ExpAndDouble(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        a, b = x.exp(), x * 2
        ctx.a = a
        ctx.b = b
        return a, b
""", ("ctx.a = a", "ctx.b = b")),
        Invalid("""
import torch
class Levels(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feats, index, *sizes):
        outs = []
        for level, size in enumerate(sizes):
            out = feats.new_zeros(size, feats.size(1)).index_add_(0, index // 2 ** level, feats)
            setattr(ctx, f"out{level}", out)
            outs.append(out)
        return tuple(outs)
""", ('setattr(ctx, f"out{level}", out)',)),
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
        Invalid('''
import torch
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.out = out  # kept for backward
        ctx.x = x
        return out
    @staticmethod
    def backward(ctx, grad):
        """d/dx exp(x) = exp(x)"""
        return grad * ctx.out + 0 * ctx.x
''', ("ctx.out = out", "ctx.x = x"), fixed='''
import torch
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.save_for_backward(out, x)  # kept for backward
        return out
    @staticmethod
    def backward(ctx, grad):
        """d/dx exp(x) = exp(x)"""
        out, x = ctx.saved_tensors
        return grad * out + 0 * x
'''),
        Invalid("""
import torch
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index):
        ctx.save_for_backward(index)
        out = src.index_select(0, index)
        ctx.src = src
        ctx.n = src.shape[0]
        return out
    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        src = ctx.src
        return grad.new_zeros(ctx.n, *grad.shape[1:]).index_add_(0, index, grad), None
""", ("ctx.src = src",), fixed="""
import torch
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index):
        ctx.save_for_backward(index, src)
        out = src.index_select(0, index)
        ctx.n = src.shape[0]
        return out
    @staticmethod
    def backward(ctx, grad):
        (index, src_saved) = ctx.saved_tensors
        src = src_saved
        return grad.new_zeros(ctx.n, *grad.shape[1:]).index_add_(0, index, grad), None
"""),
        Invalid("""
import torch
import triton
import triton.language as tl
@triton.jit
def _kl_kernel(logp_ptr, ref_ptr, mask_ptr, out_ptr):
    row = tl.program_id(0)
    keep = tl.load(mask_ptr + row)
    if keep == 1:
        tl.store(out_ptr + row, tl.load(ref_ptr + row) - tl.load(logp_ptr + row))
class KL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logp, ref, mask):
        out = torch.zeros_like(logp)
        _kl_kernel[(logp.numel(),)](logp, ref, mask, out)
        ctx.ref = ref
        return out
    @staticmethod
    def backward(ctx, grad):
        return -grad, None, None
""", ("ctx.ref = ref",), fixed="""
import torch
import triton
import triton.language as tl
@triton.jit
def _kl_kernel(logp_ptr, ref_ptr, mask_ptr, out_ptr):
    row = tl.program_id(0)
    keep = tl.load(mask_ptr + row)
    if keep == 1:
        tl.store(out_ptr + row, tl.load(ref_ptr + row) - tl.load(logp_ptr + row))
class KL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logp, ref, mask):
        out = torch.zeros_like(logp)
        _kl_kernel[(logp.numel(),)](logp, ref, mask, out)
        ctx.save_for_backward(ref)
        return out
    @staticmethod
    def backward(ctx, grad):
        ref, = ctx.saved_tensors
        return -grad, None, None
"""),
        Invalid("""
import torch
class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x.pow(3)
    @staticmethod
    def backward(ctx, grad):
        if not hasattr(ctx, "x"):
            return None
        return 3 * grad * ctx.x ** 2
""", ("ctx.x = x",), fixed="""
import torch
class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x.pow(3)
    @staticmethod
    def backward(ctx, grad):
        if not hasattr(ctx, "x"):
            return None
        return 3 * grad * ctx.x ** 2
"""),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        through: dict[int, list] = {}  # stores made in another module, by the call that made them
        yield from self._stores(model, through)
        for stores in through.values():
            yield self._set_elsewhere(stores)

    @staticmethod
    def _set_elsewhere(stores: list) -> Hit:
        """One finding per call of another module's def that keeps tensors on ctx (`stash(ctx, x,
        index)`), naming that def's place and each attribute: the call is the line to change."""
        first = stores[0][0]
        callee, at = first.through

        def named(chosen) -> str:
            return ", ".join(dict.fromkeys(f"{s.ctx}.{s.attribute}" for s in chosen))

        kinds = {s.kind for s, _ in stores}
        if VIEW in kinds:
            what, why = "a view of the output", "a cycle never freed"
        elif kinds & {OUTPUT, CONTAINER}:
            several = any(s.several_outputs for s, _ in stores)
            what, why = ("outputs", "cycles never freed") if several else \
                ("the output", "a cycle only gc frees")
        else:
            what, why = "tensors", "alive after backward"
        # The output's attributes first; inputs and intermediates a helper keeps beside it (`stash_all(ctx,
        # src, index, out)`) are named apart, so "the output" names only what holds it.
        cycle = [s for s, _ in stores if s.kind in (VIEW, OUTPUT, CONTAINER)]
        plain = [s for s, _ in stores if s.kind not in (VIEW, OUTPUT, CONTAINER)]
        place = f" ({at})" if at else ""

        def message(beside: str) -> str:
            return f"{callee}(){place} keeps {what} on {named(cycle or plain)}{beside}: {why}; use save_for_backward"

        text = message(f" and tensors on {named(plain)}" if cycle and plain else "")
        if len(text) > 120 and cycle and plain:  # one line: the other attributes only counted
            text = message(f" and {len({(s.ctx, s.attribute) for s in plain})} more tensors")
        severity = Severity.ERROR if any(sev is Severity.ERROR for _, sev in stores) else Severity.WARNING
        return Hit(first.node, text, severity, f"{first.function}.ctx.{first.attribute}")

    def _stores(self, model: FileModel, through: dict[int, list]) -> Iterator[Hit]:
        for store in tensors_kept_on_ctx(model):
            kind, several, save = store.kind, store.several_outputs, store.save_call
            fix = None if store.save_instead is None else FixPlan(
                f"Save with {store.ctx}.save_for_backward(...)", Applicability.SAFE, store.save_instead)
            # The attribute, then what it holds: `ctx.out holds its own output: ...`. The measured
            # why (the cycle, how long it lives) is in the doc.
            attr, holds = f"{store.ctx}.{store.attribute}", "holds"
            if store.attribute == "<dynamic>":
                attr, holds = f"setattr({store.ctx}, ...)", "stores"
            subject = f"{store.function}.ctx.{store.attribute}"
            severity = Severity.ERROR
            if kind == VIEW:
                message = (f"{attr} {holds} a view of its own output: a cycle never freed; save_for_backward the "
                           "output, slice it in backward")
            elif kind in (OUTPUT, CONTAINER) and several:
                what = "an output" if kind == OUTPUT else "a container of outputs"
                message = f"{attr} {holds} {what} and ctx holds two or more: cycles never freed; use {save}"
            elif kind in (OUTPUT, CONTAINER):
                what = "its own output" if kind == OUTPUT else "a container of its own output"
                message = f"{attr} {holds} {what}: a cycle only the cyclic collector frees; use {save}"
            else:
                what = "tensors" if store.several_values else "a tensor"
                message = f"{attr} {holds} {what}: no version-counter check, alive after backward; use {save}"
                severity = Severity.WARNING
            if store.through is not None:
                through.setdefault(id(store.node), []).append((store, severity))
                continue
            if len(message) > 120:  # a long attribute and value name: the flagged line shows the value
                message = message.replace(save, f"{store.ctx}.save_for_backward(...)")
            yield Hit(store.node, message, severity, subject, fix)
