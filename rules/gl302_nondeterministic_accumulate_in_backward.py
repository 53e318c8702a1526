from __future__ import annotations

import os
from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import (
    ATOMIC_ADD,
    CUDA_EXT_ATOMIC,
    NAMED_ATOMIC_KERNEL,
    NATIVE_ATOMIC,
    THREADED_ACCUMULATE,
    FileModel,
    atomic_kernel_launches_from_backward,
    methods_of_functions,
    nondeterministic_sums_in_backward,
)
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule

_SWITCHES = ("torch.use_deterministic_algorithms(True) switches it to a deterministic kernel: the torch 2.13 "
             "docstring lists it among the operations that \"will act deterministically when mode=True\"")
# What each kind of unordered sum is and what to do, in one sentence; the measured why is in the doc.
_MESSAGES = {
    ATOMIC_ADD: "`{shown}` in backward uses atomicAdd on CUDA, so gradients vary; "
                "set use_deterministic_algorithms(True)",
    THREADED_ACCUMULATE: "`{shown}(accumulate=True)` in backward: thread order varies gradients; "
                         "set use_deterministic_algorithms(True)",
    CUDA_EXT_ATOMIC: "`{shown}` adds atomically on CUDA: gradients vary run to run; pass deterministic=True",
    NAMED_ATOMIC_KERNEL: "`{shown}(...)` in backward adds atomically, by its name: gradients vary; "
                         "sum sorted segments",
    NATIVE_ATOMIC: "`{shown}` in backward: float atomicAdd ({at}) varies gradients; sum in a fixed order",
}
# The same, for a call made by a def backward calls (`scatter() (utils/_scatter.py:14) runs ...`).
_THROUGH = {
    ATOMIC_ADD: "atomicAdd on CUDA, gradients vary; use_deterministic_algorithms(True)",
    THREADED_ACCUMULATE: "thread order varies gradients; use_deterministic_algorithms(True)",
    CUDA_EXT_ATOMIC: "it adds atomically on CUDA, so gradients vary; pass deterministic=True",
    NAMED_ATOMIC_KERNEL: "it adds atomically, by its name, so gradients vary; sum sorted segments",
    NATIVE_ATOMIC: "its CUDA source adds floats with atomicAdd, so gradients vary",
}


def _message(found) -> str:
    """One line of at most 120 characters where it can be: a long source path gives way to its
    file name, then the advice (the doc has it) to the names."""
    message = _MESSAGES[found.kind].format(shown=found.shown, at=found.at)
    if len(message) > 120 and found.at is not None:
        message = _MESSAGES[found.kind].format(shown=found.shown, at=os.path.basename(found.at))
    return message.removesuffix("; sum in a fixed order") if len(message) > 120 else message


class NondeterministicAccumulateInBackward(Rule):
    code = "GL302"
    name = "nondeterministic-accumulate-in-backward"
    severity = Severity.WARNING
    summary = "scatter_add_/index_add_/index_put_(accumulate=True) in backward: float gradients differ run to run"
    # A Function's backward may call a def or launch a kernel of another module that sums so:
    # its text is not this file's, so the file needs only a backward (GL201's markers).
    markers = (("autograd", "def backward"), "register_autograd", *(
        (anchor, op) for anchor in ("backward", "register_autograd")
        for op in ("scatter_add", "index_add", "index_put", "scatter_reduce", "atomic", "Atomic")))
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
- the launch of a Triton kernel that calls `tl.atomic_add` with a value that is not an integer
  literal (`_bwd_kernel[grid](...)`), in backward or in a helper of the file that backward calls;
  the kernel is defined in the same file or imported from another module of the project (the
  message names where);
- any of these calls made by a def that backward calls, of the same file or imported from another
  module of the project (`scatter(grad, index, reduce="sum")` doing `scatter_add_`), read with the
  values backward passes: branches that the call's string arguments (or the def's string defaults)
  rule out are left out, so `reduce="max"` does not run the `reduce == "sum"` branch; the message
  names the def and where it is;
- calls into a custom kernel whose name says it adds atomically (`_ext.scatter_add_atomic`,
  `torch.ops.mylib.atomic_segment_sum`, an imported `atomicAdd`); a function defined in the same
  file is not one;
- calls of a compiled extension's function whose C++/CUDA source is in the project
  (`_ext.gather_points_grad(...)`, bound by `m.def("gather_points_grad", &gather_points_grad)`;
  `torch.ops.myops.op(...)` of a project's own namespace) that reach, through calls, kernel
  launches and the implementations a registration macro names (`REGISTER_DEVICE_IMPL(op_impl,
  CUDA, op_cuda)`), an `atomicAdd` (or `gpuAtomicAdd`) into a target declared `float`, `double`,
  a half type or a floating template type such as `scalar_t` (a template `T` is what the kernel is
  launched with: `k<scalar_t><<<...>>>`); the message names the source line. Integer targets, a
  `T` launched with no known type, a name bound more than once where one binding adds nothing,
  and sources past 2,000 files are left out.

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
2.13 and 2 threads, 2000000 float32 values summed into 4 slots gave 20 different results in 20 runs
(float64, or one thread, gave one); under `torch.use_deterministic_algorithms(True)` it gave one.
With 200000 values the sums varied as much on an idle machine and gave one result on a loaded one,
where the two threads seldom add at the same time: the bug comes and goes with the machine's load.
A custom kernel follows `use_deterministic_algorithms` only if it checks the flag itself, and a
Triton kernel never sees it: its programs call `tl.atomic_add` in whatever order they run.
`gradlint.cuda_ext.scatter_add` picks its atomic kernel on CUDA unless `deterministic=True` or
torch's flag is set.

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
or call `torch.use_deterministic_algorithms(True)` once at start-up, or sum one sorted segment at
a time. For a Triton kernel, accumulate per program into a buffer and reduce it in a fixed order
(or sort by target).
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
        # A def of the file that backward calls sums with scatter_add_ for reduce="sum" only.
        Invalid("""
import torch
def scatter(src, index, size, reduce="sum"):
    if reduce == "max":
        return src.new_zeros(size).scatter_reduce(0, index, src, reduce="amax")
    return src.new_zeros(size).scatter_add_(0, index, src)
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.rows = x.size(0)
        return x[index]
    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        best = scatter(grad, index, ctx.rows, reduce="max")
        return scatter(grad, index, ctx.rows) + 0 * best, None
""", ("return scatter(grad, index, ctx.rows) + 0 * best, None",)),
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
        for function, backward in methods_of_functions(model, "backward"):
            for found in nondeterministic_sums_in_backward(model, function, backward):
                message = _message(found) if found.through is None else \
                    f"{found.through} runs `{found.shown}`: {_THROUGH[found.kind]}"
                yield Hit(found.node, message, subject=f"{function.name}.backward")
        for launch in atomic_kernel_launches_from_backward(model):
            where = f" ({launch.defined_in})" if launch.defined_in else ""
            yield Hit(launch.node, (
                f"`{launch.kernel}`{where} in backward: float tl.atomic_add varies gradients; "
                "sum in a fixed order"), subject=launch.kernel)
