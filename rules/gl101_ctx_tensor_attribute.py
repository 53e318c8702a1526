from __future__ import annotations

import keyword
from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint.file_model import AutogradFunction, FileModel, bindings_of, leading_params
from gradlint.findings import Applicability, Severity
from gradlint.flow import AttributeStore, MarkedNonDifferentiable, ReturnValue, SavedForBackward, Walk
from gradlint.prescan import descendants
from gradlint.torch_api import TENSOR_PROOF_METHODS, NUMPY_SHARED_ATTRIBUTES, TENSOR_ATTRIBUTES
from gradlint.rewrites import code, first_statement, statement_in_body
from gradlint.rule import DeleteLines, FixPlan, Hit, InsertLineAbove, Invalid, Replace, Rule
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
        # A forward input whose items are used as tensors (file_model.input_value).
        return "tensor" if "tensor" in inner or (value.is_input and not inner) else None
    return "tensor" if value.is_tensor else None


def non_differentiable(walk: Walk) -> set[int]:
    """Outputs passed to ctx.mark_non_differentiable: they get no grad_fn, so keeping one on ctx
    makes no cycle (measured: 0 of 20 alive after gc.collect(), 20 of 20 without the mark)."""
    found: set[int] = set()
    for event in walk.of(MarkedNonDifferentiable):
        for value in event.values:
            found |= bindings_of(value)
    return found


def keeps_several_outputs(walk: Walk) -> bool:
    """Whether ctx holds two or more outputs of one call (`ctx.a, ctx.b = a, b; return a, b`):
    then the outputs share the grad_fn node the cycle runs through, and torch 2.13's collector
    cannot free it (ground truth: one output on ctx is freed by gc.collect(), two are not)."""
    stored: set[int] = set()
    differentiable = walk.output_bindings - non_differentiable(walk)
    for store in walk.of(AttributeStore):
        if store.owner.kind is Kind.CTX:
            outputs = bindings_of(store.value) & differentiable
            if outputs and store.attribute == "<dynamic>" and store.where.loops:
                return True  # setattr(ctx, f"out{i}", out) over the outputs: one attribute each
            stored |= outputs
    if len(stored) < 2:
        return False
    if walk.role.kind != "forward":  # setup_context: `output` is one call's outputs
        return True
    return any(len(bindings_of(r.value) & stored) >= 2 for r in walk.of(ReturnValue))


def _marked(walk: Walk, value: Val) -> bool:
    return value.binding is not None and value.binding in non_differentiable(walk)


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
closures that receive ctx).

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
it launches uses it so (`tl.load(ptr + offs)` outside an `if`), its annotation says so
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
of the file subclasses this one (its backward would unpack what this forward saves).
"""
    VALID = (
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
        for function, walk in model.autograd_walks:
            several = keeps_several_outputs(walk)
            for store in walk.of(AttributeStore):
                if store.owner.kind is not Kind.CTX:
                    continue
                kind = stored_kind(walk, store.value)
                if kind is None and store.value.kind is Kind.UNKNOWN and _used_as_tensor_in_backward(function, store.attribute):
                    kind = "tensor"  # `out = x * w` says nothing of w (a float passes); `ctx.w.t()` does
                if kind is None:
                    continue
                if kind == "output" and _marked(walk, store.value):
                    kind = "tensor"  # no grad_fn, no cycle: what is left is the version-counter check
                if kind in ("output", "view") and store.value.int64:
                    # an integer output (argsort, topk indices) never requires grad: no grad_fn, no cycle
                    kind = "tensor"
                # save_for_backward takes tensors only: `ctx.pair = (a, b)` would become a TypeError,
                # and so would `ctx.perm = perm` for a NumPy perm known only by `perm.shape`
                fix = _save_instead(function, walk, store) \
                    if store.value.kind is Kind.TENSOR and not _known_by_shape_only(model, walk, store) else None
                # The attribute, then what it holds: `ctx.out holds its own output: ...`. The measured
                # why (the cycle, how long it lives) is in the doc.
                attr, holds = f"{store.owner_name}.{store.attribute}", "holds"
                if store.attribute == "<dynamic>":
                    attr, holds = f"setattr({store.owner_name}, ...)", "stores"
                subject = f"{function.name}.ctx.{store.attribute}"
                save = _save_call(store)
                severity = Severity.ERROR
                if kind == "view":
                    message = (f"{attr} {holds} a view of its own output: a cycle never freed; save_for_backward the "
                               "output, slice it in backward")
                elif kind in ("output", "container") and several:
                    what = "an output" if kind == "output" else "a container of outputs"
                    message = f"{attr} {holds} {what} and ctx holds two or more: cycles never freed; use {save}"
                elif kind in ("output", "container"):
                    what = "its own output" if kind == "output" else "a container of its own output"
                    message = f"{attr} {holds} {what}: a cycle only the cyclic collector frees; use {save}"
                else:
                    what = "tensors" if store.value.kind is Kind.CONTAINER else "a tensor"
                    message = f"{attr} {holds} {what}: no version-counter check, alive after backward; use {save}"
                    severity = Severity.WARNING
                if len(message) > 120:  # a long attribute and value name: the flagged line shows the value
                    message = message.replace(save, f"{store.owner_name}.save_for_backward(...)")
                yield Hit(store.node, message, severity, subject, fix)


def _save_call(store: AttributeStore) -> str:
    """`ctx.save_for_backward(out)` for `ctx.out = out`; `(...)` where the value is no plain name
    or no tensor (save_for_backward takes tensors, not a list of them)."""
    node = store.where.node
    if store.value.kind is Kind.TENSOR and isinstance(node, cst.Assign) and len(node.targets) == 1 \
            and node.targets[0].target is store.target and isinstance(node.value, cst.Name):
        return f"{store.owner_name}.save_for_backward({node.value.value})"
    return f"{store.owner_name}.save_for_backward(...)"


def _known_by_shape_only(model: FileModel, walk: Walk, store: AttributeStore) -> bool:
    """`ctx.perm = perm` for a forward input read only as `.shape`/`.dtype`/...: a NumPy array too."""
    node = store.where.node
    value = node.value if isinstance(node, cst.Assign) else None
    if not isinstance(value, cst.Name) or not isinstance(walk.function, cst.FunctionDef):
        return False
    scan = model.prescan(walk.function)
    return value.value in scan.attribute_uses and value.value not in scan.tensor_uses


_TENSOR_ONLY_ATTRIBUTES = TENSOR_ATTRIBUTES - NUMPY_SHARED_ATTRIBUTES


def _used_as_tensor_in_backward(function: AutogradFunction, attribute: str) -> bool:
    """backward reads `ctx.<attribute>` as only a tensor is read: `.t()`, `.index_select(...)`,
    `.requires_grad` (not `.shape` or `.device`: a NumPy array, a generator or a config has them)."""
    backward = function.backward
    ctx = _first_param(backward) if backward is not None else None
    if ctx is None:
        return False
    for node in descendants(backward.body):
        if isinstance(node, cst.Attribute) and (node.attr.value in _TENSOR_ONLY_ATTRIBUTES or node.attr.value in TENSOR_PROOF_METHODS):
            inner = node.value
            if isinstance(inner, cst.Attribute) and inner.attr.value == attribute \
                    and isinstance(inner.value, cst.Name) and inner.value.value == ctx:
                return True
    return False


# ----- the fix ------------------------------------------------------------------------------
# `ctx.out = out` in forward and `ctx.out` in backward become `ctx.save_for_backward(out)` and
# `out, = ctx.saved_tensors`; a second attribute joins the existing call and unpacking in the next
# round of fixes. Offered only where every use of the attribute can be seen and rewritten.

_ASSIGNING = (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.With, cst.NamedExpr, cst.Del,
              cst.Import, cst.ImportFrom, cst.FunctionDef, cst.ClassDef)


def _names_used(node: cst.CSTNode) -> set[str]:
    """Variable names (not attribute names: `ctx.out` uses `ctx`, not `out`)."""
    attributes = {id(n.attr) for n in descendants(node) if isinstance(n, cst.Attribute)}
    return {n.value for n in descendants(node) if isinstance(n, cst.Name) and id(n) not in attributes}


def _binds(node: cst.CSTNode, name: str) -> bool:
    """Whether any statement inside `node` may rebind `name` (conservative: any binding form that
    mentions the name counts)."""
    return any(isinstance(n, _ASSIGNING) and name in _names_used(n) and not _only_reads(n, name)
               for n in descendants(node))


def _only_reads(node: cst.CSTNode, name: str) -> bool:
    if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        return not any(name in _names_used(t) and not isinstance(t, (cst.Attribute, cst.Subscript)) for t in targets)
    if isinstance(node, cst.For):
        return name not in _names_used(node.target)
    if isinstance(node, cst.With):
        return not any(item.asname is not None and name in _names_used(item.asname) for item in node.items)
    return False


def _ctx_attributes(node: cst.CSTNode, attribute: str) -> list[cst.Attribute]:
    return [n for n in descendants(node) if isinstance(n, cst.Attribute) and n.attr.value == attribute]


def _mentions_string(node: cst.CSTNode, text: str) -> bool:
    return any(isinstance(n, cst.SimpleString) and n.evaluated_value == text for n in descendants(node))


def _saved_tensors_unpacking(backward: cst.FunctionDef, ctx: str) -> tuple[cst.Assign, list[str]] | None:
    """`a, b = ctx.saved_tensors` directly in backward's body, with plain names."""
    for statement in backward.body.body:
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            continue
        assign = statement.body[0]
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and code(assign.value).strip() == f"{ctx}.saved_tensors":
            target = assign.targets[0].target
            if isinstance(target, (cst.Tuple, cst.List)) and all(isinstance(e, cst.Element) and isinstance(e.value, cst.Name)
                                                                   for e in target.elements):
                return assign, [e.value.value for e in target.elements]
            return None
    return None


def _first_param(function: cst.FunctionDef) -> str | None:
    params = function.params.params[leading_params(function):]
    return params[0].name.value if params else None


def _subclassed(model: FileModel, function: AutogradFunction) -> bool:
    """A Function of the file that inherits from this one: its own backward (or forward) reads
    what this forward saves, and the fix would not rewrite it (entmax's SparsemaxBisectFunction
    unpacks one saved tensor from EntmaxBisectFunction's forward)."""
    return any(other.name != function.name and function.name in model.ancestors(other.name)
               for other in model.function_classes)


def _save_instead(function: AutogradFunction, walk: Walk, store: AttributeStore) -> FixPlan | None:
    saver = walk.function
    backward = function.backward
    if _subclassed(walk.model, function):
        return None
    assign = store.where.node
    if not (isinstance(function.node, cst.ClassDef) and isinstance(saver, cst.FunctionDef) and backward is not None
            and isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.targets[0].target is store.target
            and isinstance(store.target, cst.Attribute) and isinstance(backward.body, cst.IndentedBlock)):
        return None
    line = statement_in_body(saver.body, assign)
    backward_ctx = _first_param(backward)
    if line is None or backward_ctx is None:
        return None
    attribute, ctx = store.attribute, store.owner_name
    # Every other mention of the attribute must be a plain read in backward.
    reads = [a for a in _ctx_attributes(backward, attribute) if code(a.value).strip() == backward_ctx]
    others = [a for a in _ctx_attributes(function.node, attribute) if a is not store.target and a not in reads]
    if others or _mentions_string(function.node, attribute) or any(_binds_attribute(backward, a) for a in reads):
        return None
    local = next((n for n in (attribute, f"{attribute}_saved") if n.isidentifier() and not keyword.iskeyword(n)
                  and n not in _names_used(backward)), None)
    if local is None:
        return None
    calls = [e for e in walk.of(SavedForBackward)]
    mentions = [a for a in _ctx_attributes(function.node, "saved_tensors")]
    changes: list = [Replace(a, local) for a in reads]
    if not calls:
        if mentions:
            return None
        changes.append(Replace(assign, f"{ctx}.save_for_backward({code(assign.value).strip()})"))
        first = first_statement(backward)
        if first is None:
            return None
        changes.append(InsertLineAbove(first, f"{local}, = {backward_ctx}.saved_tensors"))
    else:
        merged = _merge(saver, line, assign, calls, backward, backward_ctx, local, mentions)
        if merged is None:
            return None
        changes.extend(merged)
    return FixPlan(f"Save with {ctx}.save_for_backward(...)", Applicability.SAFE, tuple(changes))


def _binds_attribute(backward: cst.FunctionDef, attribute: cst.Attribute) -> bool:
    """`ctx.x = ...`, `ctx.x += ...`, `del ctx.x` in backward: not a read to rewrite."""
    for node in descendants(backward):
        if isinstance(node, cst.Assign) and any(t.target is attribute for t in node.targets):
            return True
        if isinstance(node, (cst.AugAssign, cst.AnnAssign)) and node.target is attribute:
            return True
        if isinstance(node, cst.Del) and attribute in set(descendants(node.target)):
            return True
    return False


def _merge(saver, line, assign, calls, backward, backward_ctx, local, mentions) -> list | None:
    """Join an existing `ctx.save_for_backward(a, b)` and `a, b = ctx.saved_tensors`: only when
    there is one of each, side by side in the two bodies, and the value is a name whose binding at
    the call is the one stored."""
    if len(calls) != 1 or not isinstance(assign.value, cst.Name):
        return None
    call = calls[0].where.node
    unpacking = _saved_tensors_unpacking(backward, backward_ctx)
    if unpacking is None or len(mentions) != 1 or not isinstance(call, cst.Call):
        return None
    unpack_assign, names = unpacking
    if len(names) != len(call.args) or any(a.keyword is not None or a.star for a in call.args):
        return None
    call_line = next((s for s in saver.body.body if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                      and isinstance(s.body[0], cst.Expr) and s.body[0].value is call), None)
    if call_line is None:
        return None
    body = list(saver.body.body)
    at_store, at_call = body.index(line), body.index(call_line)
    name = assign.value.value
    between = body[min(at_store, at_call) + 1:max(at_store, at_call)]
    if any(_binds(s, name) for s in between):
        return None
    if at_call < at_store:  # the call must already see this binding of the name
        params = {p.name.value for p in saver.params.params}
        if name not in params and not any(_binds(s, name) for s in body[:at_call]):
            return None
    arguments = [code(a.value).strip() for a in call.args] + [name]
    target = unpack_assign.targets[0].target
    new_target = ", ".join([*names, local])
    if isinstance(target, cst.List):  # a tuple's position excludes its parentheses, a list's includes its brackets
        new_target = f"[{new_target}]"
    return [
        Replace(call, f"{code(call.func).strip()}({', '.join(arguments)})"),
        DeleteLines(line),
        Replace(target, new_target),
    ]
