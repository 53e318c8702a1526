"""Message passing and graph attention with hand-written backwards (GAT / GraphSAGE style)."""
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

from gradlint.cuda_ext import scatter_add

_segment_ext = load_inline(
    name="segment_ext",
    cpp_sources=["torch::Tensor segment_sum_atomic(torch::Tensor src, torch::Tensor index, int64_t n);"],
    functions=["segment_sum_atomic", "segment_sum_sorted"],
)


class MeanAggregate(torch.autograd.Function):
    """out[v] = mean of x[u] over the edges u -> v (GraphSAGE mean aggregator)."""

    @staticmethod
    def forward(ctx, x, src, dst):
        num_nodes = x.size(0)
        deg = torch.zeros(num_nodes, dtype=torch.long, device=x.device).index_add_(0, dst, torch.ones_like(dst))
        out = x.new_zeros(num_nodes, x.size(1)).index_add_(0, dst, x[src])
        inv_deg = deg.clamp(min=1).float().reciprocal()
        ctx.save_for_backward(src, dst, inv_deg)
        return out * inv_deg.unsqueeze(-1)

    @staticmethod
    def backward(ctx, grad_out):
        src, dst, inv_deg = ctx.saved_tensors
        per_edge = (grad_out * inv_deg.unsqueeze(-1))[dst]
        grad_x = torch.zeros_like(grad_out)
        grad_x.index_add_(0, src, per_edge)
        return grad_x, None, None


class EdgeAttention(torch.autograd.Function):
    """alpha_e = softmax over incoming edges of a . [h_src || h_dst]; out[v] = sum_e alpha_e h_src."""

    @staticmethod
    def forward(ctx, h, att_src, att_dst, src, dst):
        num_nodes = h.size(0)
        logits = (h[src] * att_src).sum(-1) + (h[dst] * att_dst).sum(-1)
        logits = torch.nn.functional.leaky_relu(logits, 0.2)
        seg_max = logits.new_full((num_nodes,), float("-inf"))
        seg_max = seg_max.scatter_reduce(0, dst, logits, reduce="amax", include_self=True)
        w = (logits - seg_max[dst]).exp()
        denom = logits.new_zeros(num_nodes).index_add_(0, dst, w)
        alpha = w / denom[dst]
        out = h.new_zeros(h.shape).index_add_(0, dst, alpha.unsqueeze(-1) * h[src])
        ctx.save_for_backward(h, att_src, att_dst, src, dst, alpha, logits)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        h, att_src, att_dst, src, dst, alpha, logits = ctx.saved_tensors
        num_nodes = h.size(0)
        g_dst = grad_out[dst]
        grad_h = torch.zeros_like(h).index_add_(0, src, alpha.unsqueeze(-1) * g_dst)
        g_alpha = (g_dst * h[src]).sum(-1)
        dot = torch.scatter_reduce(g_alpha.new_zeros(num_nodes), 0, dst, g_alpha * alpha, "sum")
        g_logit = alpha * (g_alpha - dot[dst])
        g_logit = torch.where(logits > 0, g_logit, 0.2 * g_logit)
        grad_att_src = (g_logit.unsqueeze(-1) * h[src]).sum(0)
        grad_att_dst = (g_logit.unsqueeze(-1) * h[dst]).sum(0)
        grad_h = torch.index_add(grad_h, 0, src, g_logit.unsqueeze(-1) * att_src)
        grad_h.index_add_(0, dst, g_logit.unsqueeze(-1) * att_dst)
        return grad_h, grad_att_src, grad_att_dst, None, None


class SegmentSoftmaxExt(torch.autograd.Function):
    """Edge softmax whose segment sums run in a compiled kernel."""

    @staticmethod
    def forward(ctx, logits, index, num_segments):
        e = (logits - logits.max()).exp()
        denom = _segment_ext.segment_sum_sorted(e, index, num_segments)
        out = e / denom[index]
        ctx.save_for_backward(index, out)
        ctx.num_segments = num_segments
        return out

    @staticmethod
    def backward(ctx, grad):
        index, out = ctx.saved_tensors
        dot = _segment_ext.segment_sum_atomic(grad * out, index, ctx.num_segments)
        return out * (grad - dot[index]), None, None


class SortedSegmentSoftmax(torch.autograd.Function):
    """The same, reproducible: fixed-order segment sums in both passes."""

    @staticmethod
    def forward(ctx, logits, index, num_segments):
        e = (logits - logits.max()).exp()
        denom = _segment_ext.segment_sum_sorted(e, index, num_segments)
        out = e / denom[index]
        ctx.save_for_backward(index, out)
        ctx.num_segments = num_segments
        return out

    @staticmethod
    def backward(ctx, grad):
        index, out = ctx.saved_tensors
        dot = _segment_ext.segment_sum_sorted(grad * out, index, ctx.num_segments)
        return out * (grad - dot[index]), None, None


class GatherNodes(torch.autograd.Function):
    """x[index] with a reproducible backward."""

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.num_nodes = x.size(0)
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        grad_x = scatter_add(grad_out, index, ctx.num_nodes, deterministic=True)
        return grad_x, None


class GatherNodesFast(torch.autograd.Function):
    """x[index]; the backward takes whatever scatter_add picks on the device."""

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.num_nodes = x.size(0)
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        return scatter_add(grad_out, index, ctx.num_nodes), None


class MaxPoolNodes(torch.autograd.Function):
    """Per-graph max pooling; ties share the gradient."""

    @staticmethod
    def forward(ctx, x, batch, num_graphs):
        index = batch.unsqueeze(-1).expand_as(x)
        out = x.new_full((num_graphs, x.size(1)), float("-inf"))
        out = out.scatter_reduce(0, index, x, reduce="amax", include_self=True)
        ctx.save_for_backward(x, batch, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, batch, out = ctx.saved_tensors
        is_max = x == out[batch]
        index = batch.unsqueeze(-1).expand_as(x)
        ties = torch.zeros_like(out).scatter_add_(0, index, is_max.to(out.dtype))
        counts = torch.zeros(out.size(0), dtype=torch.long).index_add_(0, batch, torch.ones_like(batch))
        grad_x = grad_out[batch] * is_max / ties[batch]
        return grad_x / counts.clamp(min=1)[batch].unsqueeze(-1), None, None


class AttentionPool(nn.Module):
    """Graph readout: attention-weighted node sums (autograd does the backward)."""

    def __init__(self, dim):
        super().__init__()
        self.gate = nn.Linear(dim, 1)

    def forward(self, x, batch, num_graphs):
        score = self.gate(x).squeeze(-1)
        w = (score - score.max()).exp()
        denom = x.new_zeros(num_graphs).index_add_(0, batch, w)
        pooled = x.new_zeros(num_graphs, x.size(1))
        return pooled.index_add_(0, batch, (w / denom[batch]).unsqueeze(-1) * x)
