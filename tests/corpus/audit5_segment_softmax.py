"""Segment softmax over incoming edges, as used by graph attention (GAT) layers."""
import torch
from torch import nn


def segment_max(src, index, num_nodes):
    idx = index.view(-1, 1).expand_as(src)
    out = src.new_full((num_nodes,) + src.shape[1:], float("-inf"))
    return out.scatter_reduce(0, idx, src, reduce="amax", include_self=True)


class SegmentSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(src, index, num_nodes):
        # src: [E, H] attention logits, index: [E] target node of every edge
        idx = index.view(-1, 1).expand_as(src)
        m = segment_max(src, index, num_nodes)
        e = (src - m.gather(0, idx)).exp()
        denom = e.new_zeros((num_nodes,) + src.shape[1:]).scatter_add_(0, idx, e)
        return e / denom.gather(0, idx)

    @staticmethod
    def setup_context(ctx, inputs, output):
        src, index, num_nodes = inputs
        ctx.num_nodes = num_nodes
        ctx.save_for_backward(index)
        ctx.alpha = output

    @staticmethod
    def backward(ctx, grad_alpha):
        (index,) = ctx.saved_tensors
        alpha = ctx.alpha
        idx = index.view(-1, 1).expand_as(alpha)
        s = alpha.new_zeros((ctx.num_nodes,) + alpha.shape[1:])
        s.scatter_add_(0, idx, grad_alpha * alpha)
        return alpha * (grad_alpha - s.gather(0, idx)), None, None


class GATLayer(nn.Module):
    def __init__(self, dim, heads=2):
        super().__init__()
        self.heads = heads
        self.lin = nn.Linear(dim, heads * dim, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, dim))
        self.att_dst = nn.Parameter(torch.randn(heads, dim))

    def forward(self, x, edge_index):
        n = x.size(0)
        h = self.lin(x).view(n, self.heads, -1)
        src, dst = edge_index
        logits = (h[src] * self.att_src).sum(-1) + (h[dst] * self.att_dst).sum(-1)
        alpha = SegmentSoftmax.apply(nn.functional.leaky_relu(logits, 0.2), dst, n)
        msg = h[src] * alpha.unsqueeze(-1)
        return h.new_zeros(h.shape).index_add_(0, dst, msg).mean(1)


def run():
    torch.manual_seed(0)
    src = torch.randn(12, 2, dtype=torch.double, requires_grad=True)
    index = torch.randint(0, 4, (12,))
    out = SegmentSoftmax.apply(src, index, 4)
    (out * torch.arange(12.0, dtype=torch.double).view(-1, 1)).sum().backward()
    ok = torch.autograd.gradcheck(lambda s: SegmentSoftmax.apply(s, index, 4), (src,))
    return out.detach(), src.grad, ok
