"""Segment reductions as torch.library custom ops, so torch.compile can trace them."""
import torch
from torch import Tensor


@torch.library.custom_op("gnnops::segment_softmax", mutates_args=())
def segment_softmax(src: Tensor, index: Tensor, num_segments: int) -> Tensor:
    seg_max = src.new_full((num_segments,), float("-inf"))
    seg_max = seg_max.scatter_reduce(0, index, src, reduce="amax")
    e = (src - seg_max[index]).exp()
    denom = src.new_zeros(num_segments).index_add_(0, index, e)
    return e / denom[index]


@segment_softmax.register_fake
def _(src, index, num_segments):
    return torch.empty_like(src)


def _segment_softmax_setup(ctx, inputs, output):
    src, index, num_segments = inputs
    ctx.num_segments = num_segments
    ctx.out = output
    ctx.save_for_backward(index)


def _segment_softmax_backward(ctx, grad):
    (index,) = ctx.saved_tensors
    out = ctx.out
    dot = grad.new_zeros(ctx.num_segments).index_add_(0, index, grad * out)
    return out * (grad - dot[index]), None, None


segment_softmax.register_autograd(_segment_softmax_backward, setup_context=_segment_softmax_setup)


@torch.library.custom_op("gnnops::segment_mean", mutates_args=())
def segment_mean(src: Tensor, index: Tensor, num_segments: int) -> Tensor:
    total = src.new_zeros(num_segments, src.size(-1)).index_add_(0, index, src)
    count = torch.bincount(index, minlength=num_segments).clamp_min(1)
    return total / count.unsqueeze(-1).to(src.dtype)


@segment_mean.register_fake
def _(src, index, num_segments):
    return src.new_empty(num_segments, src.size(-1))


def _segment_mean_setup(ctx, inputs, output):
    src, index, num_segments = inputs
    ctx.num_segments = num_segments
    ctx.src_dtype = src.dtype
    ctx.save_for_backward(index)


def _segment_mean_backward(ctx, grad):
    (index,) = ctx.saved_tensors
    count = torch.bincount(index, minlength=ctx.num_segments).clamp_min(1)
    grad_src = (grad / count.unsqueeze(-1).to(grad.dtype)).index_select(0, index)
    return grad_src, None, None


segment_mean.register_autograd(_segment_mean_backward, setup_context=_segment_mean_setup)


@torch.library.custom_op("gnnops::gather_rows", mutates_args=())
def gather_rows(table: Tensor, index: Tensor) -> Tensor:
    return table.index_select(0, index)


@gather_rows.register_fake
def _(table, index):
    return table.new_empty(index.numel(), table.size(-1))


def _gather_rows_setup(ctx, inputs, output):
    table, index = inputs
    ctx.num_rows = table.size(0)
    ctx.save_for_backward(index.long())


def _gather_rows_backward(ctx, grad):
    (index,) = ctx.saved_tensors
    grad_table = grad.new_zeros(ctx.num_rows, grad.size(-1)).index_add_(0, index, grad)
    return grad_table, None


gather_rows.register_autograd(_gather_rows_backward, setup_context=_gather_rows_setup)
