"""Scatter reductions over edge indices for message passing.

The kernels are plain PyTorch so they run on CPU in the unit tests; the CUDA
build swaps in fused kernels that follow the same autograd contract.
"""
import torch


class ScatterSum(torch.autograd.Function):
    """out[index[i]] += src[i] along `dim`."""

    @staticmethod
    def forward(ctx, src, index, dim, dim_size):
        ctx.dim = dim
        ctx.dim_size = dim_size
        ctx.src_shape = src.shape
        shape = list(src.shape)
        shape[dim] = dim_size
        out = src.new_zeros(shape)
        out.index_add_(dim, index, src)
        ctx.save_for_backward(index.to(torch.int32))
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        grad_src = grad_out.index_select(ctx.dim, index)
        return grad_src, None, None, None


class ScatterMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, dim_size, eps=1e-12):
        ones = torch.ones_like(index, dtype=src.dtype)
        count = torch.zeros(dim_size, dtype=src.dtype, device=src.device)
        count.index_add_(0, index, ones)
        total = src.new_zeros((dim_size, src.size(1)))
        total.index_add_(0, index, src)
        out = total / count.clamp_min(eps).unsqueeze(-1)
        ctx.count = count
        ctx.eps = eps
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        scale = 1.0 / ctx.count.clamp_min(ctx.eps)
        grad_src = (grad_out * scale.unsqueeze(-1)).index_select(0, index)
        return grad_src, None, None


class ScatterMax(torch.autograd.Function):
    """Segment max that also returns the winning source row of every output."""

    @staticmethod
    def forward(ctx, src, index, dim_size):
        n, f = src.shape
        expanded = index.view(-1, 1).expand(n, f)
        out = src.new_full((dim_size, f), float("-inf"))
        out.scatter_reduce_(0, expanded, src, reduce="amax", include_self=True)
        hit = src == out.index_select(0, index)
        rows = torch.arange(n, device=src.device).view(-1, 1).expand(n, f)
        argmax = torch.full((dim_size, f), n, dtype=torch.long, device=src.device)
        argmax.scatter_reduce_(0, expanded, torch.where(hit, rows, n), reduce="amin")
        ctx.mark_non_differentiable(argmax)
        ctx.num_src = n
        ctx.save_for_backward(argmax)
        return out, argmax

    @staticmethod
    def backward(ctx, grad_out, grad_argmax):
        (argmax,) = ctx.saved_tensors
        n = ctx.num_src
        valid = (argmax < n).to(grad_out.dtype)
        grad_src = grad_out.new_zeros((n + 1, grad_out.size(1)))
        grad_src.scatter_(0, argmax, grad_out * valid)
        return grad_src[:n]


class ScatterSoftmax(torch.autograd.Function):
    """Softmax over the rows of `src` that share an index."""

    @staticmethod
    def forward(ctx, src, index, dim_size):
        seg_max = ScatterMax.apply(src, index, dim_size)[0]
        shifted = (src - seg_max.index_select(0, index)).exp()
        denom = ScatterSum.apply(shifted, index, 0, dim_size)
        out = shifted / denom.index_select(0, index)
        ctx.out = out
        ctx.index = index
        ctx.dim_size = dim_size
        return out

    @staticmethod
    def backward(ctx, grad_out):
        out, index = ctx.out, ctx.index
        dot = ScatterSum.apply(grad_out * out, index, 0, ctx.dim_size)
        return out * (grad_out - dot.index_select(0, index)), None, None


def scatter_sum(src, index, dim=0, dim_size=None):
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() else 0
    return ScatterSum.apply(src, index, dim, dim_size)


def scatter_mean(src, index, dim_size=None):
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() else 0
    return ScatterMean.apply(src, index, dim_size)


def scatter_softmax(src, index, dim_size=None):
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() else 0
    return ScatterSoftmax.apply(src, index, dim_size)
