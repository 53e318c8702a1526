"""Fused edge-list attention for graph transformers."""
import math

import torch
import torch.nn as nn


class EdgeSoftmaxAttention(torch.autograd.function.Function):
    """alpha_e = softmax over the incoming edges of q[dst] . k[src]; out[dst] += alpha_e * v[src]."""

    @staticmethod
    def forward(ctx, q, k, v, edge_index, num_nodes):
        src, dst = edge_index[0], edge_index[1]
        scale = 1.0 / math.sqrt(q.size(-1))
        logits = (q[dst] * k[src]).sum(-1) * scale
        seg_max = torch.full((num_nodes,), float("-inf"), device=q.device, dtype=q.dtype)
        seg_max.scatter_reduce_(0, dst, logits, reduce="amax")
        w = (logits - seg_max[dst]).exp()
        denom = torch.zeros(num_nodes, device=q.device, dtype=q.dtype).index_add_(0, dst, w)
        alpha = w / denom[dst]
        out = torch.zeros_like(q).index_add_(0, dst, alpha.unsqueeze(-1) * v[src])
        ctx.scale = scale
        ctx.num_nodes = num_nodes
        ctx.save_for_backward(q, k, v, alpha, edge_index)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, alpha, edge_index = ctx.saved_tensors
        src, dst = edge_index[0], edge_index[1]
        g_dst = grad_out[dst]
        grad_v = torch.zeros_like(v).index_add_(0, src, alpha.unsqueeze(-1) * g_dst)
        g_alpha = (g_dst * v[src]).sum(-1)
        dot = torch.zeros(ctx.num_nodes, device=q.device, dtype=q.dtype).index_add_(0, dst, g_alpha * alpha)
        g_logit = alpha * (g_alpha - dot[dst]) * ctx.scale
        grad_q = torch.zeros_like(q).index_add_(0, dst, g_logit.unsqueeze(-1) * k[src])
        grad_k = torch.zeros_like(k).index_add_(0, src, g_logit.unsqueeze(-1) * q[dst])
        return grad_q, grad_k, grad_v, None, None


class HeadSplitProjection(torch.autograd.function.Function):
    """x @ weight, with the per-head view kept for the attention kernel."""

    @staticmethod
    def forward(ctx, x, weight, heads):
        n = x.size(0)
        out = x @ weight
        ctx.heads = heads
        ctx.per_head = out.view(n, heads, -1)
        ctx.save_for_backward(x, weight)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        if not ctx.needs_input_grad[1]:
            return grad_out @ weight.t(), None
        return grad_out @ weight.t(), x.t() @ grad_out, None


class GraphTransformerLayer(nn.Module):
    def __init__(self, dim, heads=4, store_attention=False):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.store_attention = store_attention
        self.last_scores = None
        self.calls = 0

    def forward(self, x, edge_index):
        h = self.norm(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        src, dst = edge_index[0], edge_index[1]
        if self.store_attention:
            scores = (q[dst] * k[src]).sum(-1) / math.sqrt(q.size(-1))
            self.last_scores = scores.detach()
        self.calls += 1
        out = EdgeSoftmaxAttention.apply(q, k, v, edge_index, x.size(0))
        return x + self.o(out)


class AttentionPool(nn.Module):
    """Gated global attention pooling (Li et al. 2016) for graph-level readout."""

    def __init__(self, dim):
        super().__init__()
        self.gate = nn.Linear(dim, 1)
        self.feat = nn.Linear(dim, dim)
        self.last_weights = None

    def forward(self, x, batch, num_graphs):
        logits = self.gate(x).squeeze(-1)
        w = torch.exp(logits - logits.max())
        denom = torch.zeros(num_graphs, device=x.device).index_add_(0, batch, w)
        w = w / denom[batch]
        self.last_weights = w
        pooled = torch.zeros(num_graphs, x.size(-1), device=x.device)
        return pooled.index_add_(0, batch, w.unsqueeze(-1) * self.feat(x))
