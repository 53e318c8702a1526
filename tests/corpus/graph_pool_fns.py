"""Autograd Functions for graph readout: segment mean/max, edge softmax, multi-feature pooling."""
import torch
import torch.nn as nn
from torch.autograd import Function
from torch.autograd.function import once_differentiable


class SegmentMean(Function):
    @staticmethod
    def forward(ctx, x, seg_ids, num_segments):
        counts = torch.bincount(seg_ids, minlength=num_segments).clamp_min(1).to(x.dtype)
        out = x.new_zeros(num_segments, x.size(1)).index_add_(0, seg_ids, x)
        ctx.num_segments = num_segments
        ctx.save_for_backward(seg_ids, counts)
        return out / counts.unsqueeze(1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        seg_ids, counts = ctx.saved_tensors
        return (grad_out / counts.unsqueeze(1))[seg_ids], None, None


class SegmentMeanChecked(SegmentMean):
    @classmethod
    def forward(cls, ctx, x, seg_ids, num_segments):
        if seg_ids.numel() != x.size(0):
            raise ValueError(f"{seg_ids.numel()} segment ids for {x.size(0)} rows")
        return super().forward(ctx, x, seg_ids, num_segments)

    @classmethod
    def backward(cls, ctx, grad_out):
        return super().backward(ctx, grad_out)


class SegmentMax(Function):
    @staticmethod
    def forward(ctx, x, seg_ids, num_segments):
        index = seg_ids.unsqueeze(1).expand_as(x)
        out = x.new_full((num_segments, x.size(1)), float("-inf"))
        out.scatter_reduce_(0, index, x, reduce="amax", include_self=True)
        ctx.save_for_backward(seg_ids)
        if ctx.needs_input_grad[0]:
            is_max = x == out[seg_ids]
            ctx.save_for_backward(seg_ids, is_max)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        seg_ids, is_max = ctx.saved_tensors
        mask = is_max.to(grad_out.dtype)
        ties = torch.zeros_like(grad_out).index_add_(0, seg_ids, mask).clamp_min(1)
        return grad_out[seg_ids] * mask / ties[seg_ids], None, None


class EdgeSoftmax(Function):
    def forward(ctx, logits, dst, num_nodes):
        seg_max = logits.new_full((num_nodes,), float("-inf"))
        seg_max.scatter_reduce_(0, dst, logits, reduce="amax", include_self=True)
        w = (logits - seg_max[dst]).exp()
        alpha = w / logits.new_zeros(num_nodes).index_add_(0, dst, w)[dst]
        ctx.num_nodes = num_nodes
        ctx.save_for_backward(alpha, dst)
        return alpha

    def backward(ctx, grad_alpha):
        alpha, dst = ctx.saved_tensors
        dot = grad_alpha.new_zeros(ctx.num_nodes).index_add_(0, dst, grad_alpha * alpha)
        return alpha * (grad_alpha - dot[dst]), None, None


class SegmentSumMany(Function):
    """Segment-sums several feature tensors that share one segmentation, in one launch."""

    @staticmethod
    def forward(ctx, seg_ids, num_segments, *feats):
        ctx.save_for_backward(seg_ids)
        return tuple(f.new_zeros(num_segments, f.size(1)).index_add_(0, seg_ids, f) for f in feats)

    @staticmethod
    def backward(ctx, *grads):
        seg_ids, = ctx.saved_tensors
        return (None, None) + tuple(g[seg_ids] for g in grads)


class GraphReadout(nn.Module):
    def __init__(self, dim, mode="mean"):
        super().__init__()
        self.mode = mode
        self.proj = nn.Linear(dim, dim)
        self.pool = SegmentMean()

    def forward(self, x, edge_attr, batch, edge_batch, num_graphs):
        h = self.proj(x)
        if self.mode == "max":
            return SegmentMax()(h, batch, num_graphs)
        if not self.training:
            return SegmentMean.forward(None, h, batch, num_graphs)
        node_sum, edge_sum = SegmentSumMany.apply(batch, num_graphs, [h, edge_attr])
        return node_sum + self.pool(edge_sum, edge_batch, num_graphs)


def readout_all(x, edge_attr, pos, batch, num_graphs):
    feats = [x, edge_attr, pos]
    sums = SegmentSumMany.apply(batch, num_graphs, feats)
    sums_ok = SegmentSumMany.apply(batch, num_graphs, *feats)
    return sums, sums_ok


def attention_readout(logits, values, dst, batch, num_nodes, num_graphs):
    alpha = EdgeSoftmax.apply(logits, dst, num_nodes)
    pooled = SegmentMeanChecked.apply(alpha.unsqueeze(-1) * values, batch, num_graphs)
    return pooled, SegmentMax.apply(values, batch, num_graphs)
