"""Autograd Functions in the setup_context style, so they work under torch.func / vmap."""
import torch
from torch import autograd


class RadiusEdgeWeight(autograd.Function):
    """Gaussian edge weights exp(-|p_i - p_j|^2 / (2 sigma^2)) for radius graphs."""

    generate_vmap_rule = True

    @staticmethod
    def forward(pos, edge_index, sigma: float):
        src, dst = edge_index[0], edge_index[1]
        d2 = (pos[src] - pos[dst]).pow(2).sum(-1)
        return torch.exp(-d2 / (2 * sigma * sigma))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pos, edge_index, sigma = inputs
        ctx.sigma = sigma
        ctx.num_nodes = pos.shape[0]
        ctx.save_for_backward(pos, edge_index, output)

    @staticmethod
    def backward(ctx, grad_w):
        pos, edge_index, w = ctx.saved_tensors
        src, dst = edge_index[0], edge_index[1]
        coef = (grad_w * w / (ctx.sigma * ctx.sigma)).unsqueeze(-1)
        diff = pos[src] - pos[dst]
        grad_pos = torch.zeros_like(pos)
        grad_pos.index_add_(0, src, -coef * diff)
        grad_pos.index_add_(0, dst, coef * diff)
        return grad_pos, None, None


class SortPool(autograd.Function):
    """Keep the k nodes with the largest last channel (DGCNN SortPooling)."""

    @staticmethod
    def forward(x, k):
        order = torch.argsort(x[:, -1], descending=True)
        return x.index_select(0, order[:k])

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, k = inputs
        ctx.num_nodes = x.size(0)
        ctx.k = k
        ctx.order = torch.argsort(x[:, -1], descending=True)

    @staticmethod
    def backward(ctx, grad_out):
        grad_x = grad_out.new_zeros(ctx.num_nodes, grad_out.size(-1))
        grad_x.index_copy_(0, ctx.order[: ctx.k], grad_out)
        return grad_x


class PairwiseDistance(autograd.Function):
    """||p_src - p_dst|| per edge with a safe gradient at zero distance."""

    @staticmethod
    def forward(pos, edge_index, eps=1e-9):
        diff = pos[edge_index[0]] - pos[edge_index[1]]
        return diff.pow(2).sum(-1).add(eps).sqrt()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pos, edge_index, eps = inputs
        ctx.dist = output
        ctx.save_for_backward(pos, edge_index)

    @staticmethod
    def backward(ctx, grad_d):
        pos, edge_index = ctx.saved_tensors
        src, dst = edge_index[0], edge_index[1]
        unit = (pos[src] - pos[dst]) / ctx.dist.unsqueeze(-1)
        g = grad_d.unsqueeze(-1) * unit
        grad_pos = torch.zeros_like(pos).index_add_(0, src, g).index_add_(0, dst, -g)
        return grad_pos, None, None


class SoftTopK(autograd.Function):
    """Straight-through top-k mask."""

    @staticmethod
    def forward(scores, k):
        idx = scores.topk(k, dim=-1).indices
        return torch.zeros_like(scores).scatter_(-1, idx, 1.0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        scores, k = inputs
        ctx.k = k
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad_mask):
        (mask,) = ctx.saved_tensors
        return grad_mask * (0.5 + 0.5 * mask), None, None, None
