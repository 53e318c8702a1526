"""Segment (CSR) reductions for ragged batches of graphs.

`lengths[g]` is the number of consecutive rows that belong to graph g, as
produced by the collate function (rows of a graph are contiguous).
"""
import torch
from torch.autograd import Function as F


def lengths_to_index(lengths):
    segments = torch.arange(lengths.numel(), device=lengths.device)
    return torch.repeat_interleave(segments, lengths)


class SegmentSum(F):
    @staticmethod
    def forward(ctx, src, lengths):
        index = lengths_to_index(lengths)
        out = src.new_zeros(lengths.numel(), src.size(-1))
        out.index_add_(0, index, src)
        ctx.num_rows = src.size(0)
        ctx.save_for_backward(index.int())
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        return grad_out.index_select(0, index), None


class SegmentNormalize(F):
    """Divide every row by the L2 norm of its whole segment."""

    @staticmethod
    def forward(ctx, src, lengths, eps=1e-6):
        segments = torch.arange(lengths.numel(), device=src.device)
        index = torch.repeat_interleave(segments, lengths).int()
        sq = src.new_zeros(lengths.numel()).index_add_(0, index, src.pow(2).sum(-1))
        norm = sq.sqrt().clamp_min(eps)
        out = src / norm.index_select(0, index).unsqueeze(-1)
        setattr(ctx, "norm", norm)
        ctx.src, ctx.index = src, index
        ctx.rows, ctx.cols = src.shape
        ctx.eps = eps
        return out

    @staticmethod
    def backward(ctx, grad_out):
        src, index, norm = ctx.src, ctx.index, ctx.norm
        n = norm.index_select(0, index).unsqueeze(-1)
        out = src / n
        dot = src.new_zeros(norm.numel()).index_add_(0, index, (grad_out * out).sum(-1))
        grad_src = (grad_out - out * dot.index_select(0, index).unsqueeze(-1)) / n
        return (grad_src,) + (None,) * 2


class SegmentWeightedSum(F):
    """out[g] = sum_{i in g} weight[i] * src[i]."""

    @staticmethod
    def forward(ctx, src, weight, lengths, num_segments):
        index = torch.repeat_interleave(torch.arange(num_segments, device=src.device), lengths)
        out = src.new_zeros(num_segments, src.size(-1))
        out.index_add_(0, index, src * weight.unsqueeze(-1))
        ctx.save_for_backward(src, weight, index.to(torch.int32))
        return out

    @staticmethod
    def backward(ctx, grad_out):
        src, weight, index = ctx.saved_tensors
        g = grad_out.index_select(0, index)
        grad_src = g * weight.unsqueeze(-1)
        grad_weight = (g * src).sum(-1)
        return (grad_src, grad_weight) + (None,) * 1


class SegmentLogSumExp(F):
    @staticmethod
    def forward(ctx, src, batch, num_graphs):
        idx = batch.to(torch.int64)
        seg_max = src.new_full((num_graphs,), float("-inf")).scatter_reduce(0, idx, src, reduce="amax")
        shifted = (src - seg_max[idx]).exp()
        total = src.new_zeros(num_graphs).index_add_(0, idx, shifted)
        out = total.log() + seg_max
        ctx.save_for_backward(src, out, batch.to(torch.int64))
        return out

    @staticmethod
    def backward(ctx, grad_out):
        src, out, idx = ctx.saved_tensors
        weight = (src - out[idx]).exp()
        return grad_out[idx] * weight, None, None


def segment_sum(src, lengths):
    return SegmentSum.apply(src, lengths)


def segment_normalize(src, lengths, eps=1e-6):
    return SegmentNormalize.apply(src, lengths, eps)


def segment_weighted_sum(src, weight, lengths):
    return SegmentWeightedSum.apply(src, weight, lengths, lengths.numel())


def segment_logsumexp(src, batch, num_graphs):
    return SegmentLogSumExp.apply(src, batch, num_graphs)
