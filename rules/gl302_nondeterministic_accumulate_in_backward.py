from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint.file_model import AutogradFunction, FileModel, leading_params
from gradlint.findings import Severity
from gradlint.flow import FunctionRole, Walk, Walker
from gradlint.names import dotted
from gradlint.prescan import child_nodes
from gradlint.rule import Hit, Invalid, Rule
from gradlint.values import UNKNOWN, Kind, Val

# Tensor methods that sum many sources into one slot: (where the summed values are: position,
# keyword) for the method form; the torch.* function form takes the tensor first.
_ATOMIC_ADD = {
    "scatter_add_": (2, "src"), "scatter_add": (2, "src"),
    "index_add_": (2, "source"), "index_add": (2, "source"),
    "scatter_reduce_": (2, "src"), "scatter_reduce": (2, "src"),
}
_INDEX_PUT = {"index_put_": (1, "values"), "index_put": (1, "values")}
_METHODS = {**_ATOMIC_ADD, **_INDEX_PUT}
_TORCH_FUNCTIONS = {f"torch.{m}": m for m in ("scatter_add", "index_add", "scatter_reduce", "index_put", "index_put_")}
_CUDA_EXT = frozenset({"gradlint.cuda_ext.scatter_add", "cuda_ext.scatter_add"})
_SUMMING_REDUCTIONS = frozenset({"sum", "mean"})
# A custom kernel whose name says it adds atomically: `scatter_add_atomic`, `atomicAdd`. A name
# alone says nothing about `segment_sum` or `scatter_add` in an extension: those may sort first.
_NAME_TOKENS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_SUMMING_WORDS = ("add", "sum", "scatter", "accum", "reduce", "segment")
_NEGATIONS = frozenset({"no", "non", "not", "without"})

# Values whose sum is exact in any order: 0/1 masks and ones (counting), in any float dtype;
# `is_max`/`has_edge` name a boolean mask by convention.
_ONES = frozenset({"torch.ones", "torch.ones_like"})
_CASTS = frozenset({"to", "float", "double", "half", "bfloat16", "type_as", "type", "bool", "contiguous"})
_BOOLEAN_NAME = re.compile(r"^(is|has)_\w+$")

_SWITCHES = ("torch.use_deterministic_algorithms(True) switches it to a deterministic kernel: the torch 2.13 "
             "docstring lists it among the operations that \"will act deterministically when mode=True\"")
_ALTERNATIVES = "a sorted segment sum, or gradlint.cuda_ext.scatter_add(..., deterministic=True)"


@dataclass(frozen=True)
class _Call:
    node: cst.Call
    receiver: Val | None  # what `x` in `x.method(...)` evaluated to; None for a plain name call
    args: tuple[tuple[cst.Arg, Val], ...]


class _CallRecorder(Walker):
    """Walks backward as the analysis does, keeping what each call's receiver and arguments
    evaluated to: an int64 scatter_add_ sums exactly in any order and is not reported."""

    def __init__(self, walk: Walk, function: cst.FunctionDef):
        super().__init__(walk, function)
        self.calls: dict[int, _Call] = {}

    def _method(self, e, method, receiver, args, positional, keywords):
        self.calls[id(e)] = _Call(e, receiver, tuple(args))
        return super()._method(e, method, receiver, args, positional, keywords)

    def _builtin(self, e, name, args, positional):
        self.calls.setdefault(id(e), _Call(e, None, tuple(args)))
        return super()._builtin(e, name, args, positional)


def _calls_in_backward(model: FileModel, function: AutogradFunction) -> list[_Call]:
    backward = function.backward
    skip = leading_params(backward)
    params = [p.name.value for p in backward.params.params][skip:]
    if not params:
        return []
    walk = Walk(model, backward, FunctionRole("backward", ctx_name=params[0], owner_class=function.name))
    walker = _CallRecorder(walk, backward)
    # Everything backward receives after ctx is an incoming gradient.
    walker.bind_params({params[0]: Val(Kind.CTX), **{name: Val(Kind.TENSOR) for name in params[1:]}})
    walker.run()
    return list(walker.calls.values())


def _single_assignments(function: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
    """Names bound exactly once in the function body (by `name = value`), with their value."""
    values: dict[str, cst.BaseExpression | None] = {}

    def visit(node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    name = target.target.value
                    values[name] = node.value if name not in values else None
        for child in child_nodes(node):
            visit(child)

    visit(function.body)
    return {name: value for name, value in values.items() if value is not None}


def _sums_exactly(model: FileModel, expr: cst.BaseExpression, bound: dict[str, cst.BaseExpression],
                  depth: int = 0) -> bool:
    """Whether the summed values are 0/1 or ones: a comparison, torch.ones*, a mask cast to
    float. Counting sums small integers, exact in float32 in any order (up to 2**24)."""
    if depth > 4:
        return False
    if isinstance(expr, cst.Comparison):
        return True
    if isinstance(expr, cst.Name):
        if _BOOLEAN_NAME.match(expr.value):
            return True
        value = bound.get(expr.value)
        return value is not None and _sums_exactly(model, value, bound, depth + 1)
    if isinstance(expr, (cst.Subscript, cst.UnaryOperation)):
        inner = expr.value if isinstance(expr, cst.Subscript) else expr.expression
        return _sums_exactly(model, inner, bound, depth + 1)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, (cst.Name, cst.Attribute)) and model.imports.qualify(func) in _ONES:
            return True
        if isinstance(func, cst.Attribute):
            if func.attr.value == "new_ones":
                return True
            if func.attr.value in _CASTS:
                return _sums_exactly(model, func.value, bound, depth + 1)
    return False


class _ExactSums:
    """`_sums_exactly` for one backward, its assignments read on the first question only."""

    def __init__(self, model: FileModel, backward: cst.FunctionDef):
        self.model = model
        self.backward = backward
        self.bound: dict[str, cst.BaseExpression] | None = None

    def __call__(self, expr: cst.BaseExpression) -> bool:
        if self.bound is None:
            self.bound = _single_assignments(self.backward)
        return _sums_exactly(self.model, expr, self.bound)


def _argument(call: _Call, position: int, keyword: str) -> tuple[cst.BaseExpression, Val] | None:
    if any(arg.star for arg, _ in call.args):
        return None
    positional = [(arg.value, value) for arg, value in call.args if arg.keyword is None]
    if position < len(positional):
        return positional[position]
    return next(((arg.value, value) for arg, value in call.args
                 if arg.keyword is not None and arg.keyword.value == keyword), None)


def _is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def _string(expr: cst.BaseExpression | None) -> str | None:
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _names_atomic_sum(name: str) -> bool:
    tokens = [t.lower() for t in _NAME_TOKENS.findall(name)]
    for i, token in enumerate(tokens):
        if token.startswith("atomic") and not (i and tokens[i - 1] in _NEGATIONS):
            rest = token[len("atomic"):] + "".join(tokens[:i] + tokens[i + 1:])
            return any(word in rest for word in _SUMMING_WORDS)
    return False


class NondeterministicAccumulateInBackward(Rule):
    code = "GL302"
    name = "nondeterministic-accumulate-in-backward"
    severity = Severity.WARNING
    summary = "scatter_add_/index_add_/index_put_(accumulate=True) in backward: float gradients differ run to run"
    markers = tuple((anchor, op) for anchor in ("backward", "register_autograd")
                    for op in ("scatter_add", "index_add", "index_put", "scatter_reduce", "atomic", "Atomic"))
    doc = f"""
## What it does
Flags, inside a custom autograd Function's `backward` (a `torch.autograd.Function` subclass or a
backward given to `register_autograd`), the calls that sum many values into one slot in an
order that changes from run to run:

- `scatter_add_`, `scatter_add`, `index_add_`, `index_add` (methods, `torch.*` and
  `torch.Tensor.*` forms) and `scatter_reduce(_)` with `reduce="sum"` or `"mean"`: on CUDA torch
  adds with atomicAdd;
- `index_put_(..., accumulate=True)` / `torch.index_put(..., accumulate=True)`: on CPU a large
  float32 accumulation adds from several threads at once (on CUDA torch sorts the indices first);
- `gradlint.cuda_ext.scatter_add(...)` without `deterministic=True`, which picks its atomic
  kernel on CUDA;
- the launch of a Triton kernel of the same file that calls `tl.atomic_add` with a value that is
  not an integer literal (`_bwd_kernel[grid](...)`), in backward or in a helper of the file that
  backward calls;
- calls into a custom kernel whose name says it adds atomically (`_ext.scatter_add_atomic`,
  `torch.ops.mylib.atomic_segment_sum`, an imported `atomicAdd`); a function defined in the same
  file is not one.

Calls on tensors known to be int64 (an integer sum is exact in any order), `reduce="amax"`/`"amin"`,
an `accumulate`/`reduce`/`deterministic` argument that is not a literal, and the same calls in
`forward` are not reported.

## Why is this bad?
Floating-point addition is not associative: when the order of the additions changes, the last
bits of the sum change. Gradients then differ from run to run with the same seed and data, which
breaks bitwise reproducibility, hides real regressions in noise and makes a diverging run
impossible to replay. On CUDA, `scatter_add_`, `index_add_` and `scatter_reduce` (sum/mean) use
atomicAdd; {_SWITCHES}. On CPU these three sum in a fixed order (measured, torch 2.13: bitwise equal
over 20 runs). `index_put_(accumulate=True)` is the opposite case: measured on CPU with torch
2.13 and 2 threads, 200000 float32 values summed into 4 slots gave 20 different results in 20 runs
(float64, or one thread, gave one); under `torch.use_deterministic_algorithms(True)` it gave one.
A custom kernel follows `use_deterministic_algorithms` only if it checks the flag itself.

## Example
```python
@staticmethod
def backward(ctx, grad_out):
    (index,) = ctx.saved_tensors
    grad_src = grad_out.new_zeros(ctx.num_nodes, grad_out.size(1))
    grad_src.index_add_(0, index, grad_out)
    return grad_src, None
```

## Use instead
```python
from gradlint.cuda_ext import scatter_add

@staticmethod
def backward(ctx, grad_out):
    (index,) = ctx.saved_tensors
    # stable sort by target, then fixed-order sums: bitwise the same on every run
    return scatter_add(grad_out, index, ctx.num_nodes, deterministic=True), None
```
or call `torch.use_deterministic_algorithms(True)` once at start-up.
"""
    VALID = (
        """
import torch
class SegmentSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, num_segments):
        ctx.save_for_backward(index)
        return src.new_zeros(num_segments, src.size(1)).index_add_(0, index, src)
    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        return grad_out.index_select(0, index), None, None
""",
        """
import torch
from gradlint.cuda_ext import scatter_add
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.num_rows = x.size(0)
        return x[index]
    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        degree = torch.zeros(ctx.num_rows, dtype=torch.long).index_add_(0, index, torch.ones_like(index))
        grad_x = scatter_add(grad_out, index, ctx.num_rows, deterministic=True)
        return grad_x / degree.clamp(min=1).unsqueeze(-1), None
""",
        """
import torch
class SegmentMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, n):
        out = src.new_zeros(n).scatter_reduce(0, index, src, reduce="amax", include_self=False)
        ctx.save_for_backward(src, index, out)
        return out
    @staticmethod
    def backward(ctx, grad_out):
        src, index, out = ctx.saved_tensors
        hits = (src == out[index]).to(src.dtype)
        ties = out.new_zeros(out.shape).index_add_(0, index, hits)
        worst = out.new_zeros(out.shape).scatter_reduce(0, index, grad_out[index], ctx.tie_reduce)
        grad = grad_out.new_zeros(src.shape)
        grad.index_put_((index,), grad_out[index], accumulate=False)
        return grad * hits / ties[index] + worst[index], None, None
""",
        """
import torch
import torch.distributed as dist
from .ext import scatter_add_nonatomic
def atomic_add_to_log(path, value):
    pass
class Reduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        return x
    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        atomic_add_to_log("grads.txt", 1)
        out = scatter_add_nonatomic(grad, index)
        dist.all_reduce(out)
        return out, None
""",
    )
    INVALID = (
        # A Triton kernel of the file that adds atomically, launched by a helper backward calls.
        Invalid("""
import torch
import triton
import triton.language as tl
@triton.jit
def _norm_bwd_kernel(dy_ptr, dw_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    dw = tl.load(dy_ptr + offs, mask=offs < n)
    tl.atomic_add(dw_ptr + offs, dw, mask=offs < n)
    tl.atomic_add(dw_ptr, 1)
def norm_backward(dy, w):
    dw = torch.zeros_like(w)
    _norm_bwd_kernel[(dy.shape[0],)](dy, dw, w.numel(), BLOCK=1024)
    return dw
class Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x * w
    @staticmethod
    def backward(ctx, dy):
        w, = ctx.saved_tensors
        return dy * w, norm_backward(dy, w)
""", ("_norm_bwd_kernel[(dy.shape[0],)](dy, dw, w.numel(), BLOCK=1024)",)),
        Invalid("""
import torch
class EdgeMessage(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, src, dst):
        ctx.save_for_backward(src, dst)
        ctx.num_nodes = x.size(0)
        return x[src] - x[dst]
    @staticmethod
    def backward(ctx, grad_msg):
        src, dst = ctx.saved_tensors
        grad_x = torch.zeros(ctx.num_nodes, grad_msg.size(1), device=grad_msg.device)
        grad_x.index_add_(0, src, grad_msg)
        grad_x = torch.index_add(grad_x, 0, dst, -grad_msg)
        return grad_x, None, None
""", ("grad_x.index_add_(0, src, grad_msg)", "grad_x = torch.index_add(")),
        Invalid("""
import torch as th
from torch.utils.cpp_extension import load
_ext = load(name="knn_ext", sources=["knn.cpp", "knn.cu"])
class KnnGather(th.autograd.Function):
    @staticmethod
    def forward(ctx, feat, knn):
        ctx.save_for_backward(knn)
        return _ext.gather(feat, knn)
    @staticmethod
    def backward(ctx, grad_out):
        (knn,) = ctx.saved_tensors
        b, n, k, c = grad_out.shape
        idx = knn.reshape(b, n * k, 1).expand(b, n * k, c)
        grad = grad_out.new_zeros(b, n, c).scatter_add_(1, idx, grad_out.reshape(b, n * k, c))
        grad2 = _ext.scatter_add_atomic(grad_out, knn)
        grad3 = th.zeros_like(grad).scatter_reduce_(1, idx, grad_out.reshape(b, n * k, c), "mean")
        return grad + grad2 + grad3, None
""", ("grad = grad_out.new_zeros(b, n, c)", "_ext.scatter_add_atomic(", "grad3 = th.zeros_like")),
        Invalid("""
import torch
from gradlint import cuda_ext
@torch.library.custom_op("gl::pick", mutates_args=())
def pick(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x[index]
def setup_context(ctx, inputs, output):
    x, index = inputs
    ctx.save_for_backward(index)
    ctx.rows = x.size(0)
def backward(ctx, grad):
    (index,) = ctx.saved_tensors
    zeros = grad.new_zeros(ctx.rows, *grad.shape[1:])
    dense = torch.index_put(zeros, (index,), grad, True)
    summed = cuda_ext.scatter_add(grad, index, ctx.rows)
    return dense + summed, None
pick.register_autograd(backward, setup_context=setup_context)
""", ("dense = torch.index_put(", "summed = cuda_ext.scatter_add(")),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for function, backward in model.distinct_methods("backward"):
            exact = _ExactSums(model, backward)
            for call in _calls_in_backward(model, function):
                message = self._message(model, call, exact)
                if message is not None:
                    yield Hit(call.node, message, subject=f"{function.name}.backward")
        kernels = model.atomic_kernels
        if not kernels:
            return
        running = model.backward_defs
        for site in model.call_sites:
            func = site.call.func  # `_bwd_kernel[grid](...)`: a launch, in backward or a helper it calls
            if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name) and func.value.value in kernels \
                    and site.function is not None and id(site.function) in running:
                yield Hit(site.call, (
                    f"`{func.value.value}` launched from backward adds floats with tl.atomic_add: the programs "
                    "add in whatever order they run, so gradients differ run to run; torch's "
                    "use_deterministic_algorithms does not reach a Triton kernel. Accumulate per program into "
                    "a buffer and reduce it in a fixed order (or sort by target)"), subject=func.value.value)

    def _message(self, model: FileModel, call: _Call, exact: _ExactSums) -> str | None:
        func = call.node.func
        qualified = model.imports.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if qualified in _CUDA_EXT:
            return self._cuda_ext(call)
        if qualified in _TORCH_FUNCTIONS:
            return self._tensor_op(call, _TORCH_FUNCTIONS[qualified], qualified, 1, exact)
        if qualified is not None and qualified.startswith("torch.Tensor.") and qualified[13:] in _METHODS:
            return self._tensor_op(call, qualified[13:], qualified, 1, exact)
        head = (dotted(func) or "").split(".")[0]
        imported = head in model.imports.aliases
        if isinstance(func, cst.Attribute) and func.attr.value in _METHODS and not imported:
            if call.receiver is not None and call.receiver.kind in (Kind.SCALAR, Kind.MODULE, Kind.CONTAINER, Kind.CTX):
                return None
            return self._tensor_op(call, func.attr.value, f"Tensor.{func.attr.value}", 0, exact)
        last = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        # An import (relative ones included) or a module-level name such as `_ext = load(...)`;
        # a def or class of this file is Python we could read, not a kernel.
        external = imported or (head in model.module_names and head not in model.functions
                                and head not in model.function_class_names and head not in model.module_class_names)
        if _names_atomic_sum(last) and external:
            return (f"`{dotted(func)}(...)` in backward: a kernel whose name says it adds atomically sums floats in "
                    f"whatever order the GPU threads arrive, so gradients differ run to run. "
                    f"torch.use_deterministic_algorithms(True) governs torch's own ops; a custom kernel follows it "
                    f"only if it checks the flag itself. Use {_ALTERNATIVES}")
        return None

    def _tensor_op(self, call: _Call, method: str, shown: str, shift: int, exact: _ExactSums) -> str | None:
        target = call.receiver if shift == 0 else _first(call)
        position, keyword = _METHODS[method]
        summed = _argument(call, position + shift, keyword)
        if (target is not None and target.int64) or (summed is not None and summed[1].int64):
            return None  # an integer sum is exact in any order
        if method in _INDEX_PUT:
            accumulate = _argument(call, position + 1 + shift, "accumulate")
            if accumulate is None or not _is_true(accumulate[0]):
                return None
        if method.startswith("scatter_reduce"):
            reduce = _argument(call, position + 1 + shift, "reduce")
            if reduce is None or _string(reduce[0]) not in _SUMMING_REDUCTIONS:
                return None
        if summed is not None and exact(summed[0]):
            return None
        if method in _INDEX_PUT:
            return (f"`{shown}(..., accumulate=True)` in backward: on CPU a large float32 accumulation adds from "
                    f"several threads at once, so gradients differ run to run (measured, torch 2.13, 2 threads: "
                    f"200000 values into 4 slots gave 20 different sums in 20 runs); "
                    f"torch.use_deterministic_algorithms(True) makes it deterministic (measured), and on CUDA torch "
                    f"sorts the indices first. Or use {_ALTERNATIVES}")
        return (f"`{shown}` in backward: on CUDA it accumulates with atomicAdd, so floating-point sums are added in a "
                f"different order and gradients differ run to run (on CPU torch sums in a fixed order). {_SWITCHES}; "
                f"or use {_ALTERNATIVES}")

    def _cuda_ext(self, call: _Call) -> str | None:
        flag = next((arg.value for arg, _ in call.args if arg.keyword is not None
                     and arg.keyword.value == "deterministic"), None)
        if flag is not None and not (isinstance(flag, cst.Name) and flag.value in ("False", "None")):
            return None  # True, or a value decided elsewhere
        return ("gradlint.cuda_ext.scatter_add without deterministic=True runs its atomic kernel on CUDA unless "
                "torch.use_deterministic_algorithms(True) is set, so gradients differ run to run; pass "
                "deterministic=True (stable sort by target, then fixed-order sums)")


def _first(call: _Call) -> Val:
    if any(arg.star for arg, _ in call.args):
        return UNKNOWN
    first = next((value for arg, value in call.args if arg.keyword is None), None)
    if first is None:
        first = next((value for arg, value in call.args if arg.keyword is not None
                      and arg.keyword.value in ("input", "self")), UNKNOWN)
    return first
