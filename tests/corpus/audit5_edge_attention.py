"""Edge attention for a GNN: a sigmoid gate per edge, with the edge state kept by a helper."""
import torch
from torch import nn


def _save_edge_state(ctx, edge_index, att):
    ctx.edge_index = edge_index
    ctx.num_edges = edge_index.size(1)
    setattr(ctx, "att", att)


class EdgeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, edge_index, a):
        src, dst = edge_index
        logits = (x[src] * x[dst] * a).sum(-1)
        att = torch.sigmoid(logits)
        _save_edge_state(ctx, edge_index, att)
        ctx.save_for_backward(x, a)
        return att

    @staticmethod
    def backward(ctx, grad_att):
        x, a = ctx.saved_tensors
        att = ctx.att
        src, dst = ctx.edge_index
        g = (grad_att * att * (1 - att)).unsqueeze(-1)
        grad_a = (g * x[src] * x[dst]).sum(0)
        grad_x = torch.zeros_like(x)
        grad_x.index_add_(0, src, g * x[dst] * a)
        grad_x.index_add_(0, dst, g * x[src] * a)
        return grad_x, None, grad_a


class GatedGraphConv(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.a = nn.Parameter(torch.randn(dim) * 0.1)
        self.lin = nn.Linear(dim, dim)

    def forward(self, x, edge_index):
        att = EdgeAttention.apply(x, edge_index, self.a)
        msg = self.lin(x)[edge_index[0]] * att.unsqueeze(-1)
        return torch.zeros_like(x).index_add_(0, edge_index[1], msg)


def run():
    torch.manual_seed(0)
    x = torch.randn(5, 3, dtype=torch.double, requires_grad=True)
    a = torch.randn(3, dtype=torch.double, requires_grad=True)
    ei = torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]])
    ok = torch.autograd.gradcheck(lambda u, v: EdgeAttention.apply(u, ei, v), (x, a))
    return EdgeAttention.apply(x, ei, a).detach(), ok
