"""Sparse 3D convolution over voxel features with precomputed kernel maps.

For every kernel offset k, (in_idx[k], out_idx[k]) lists the active input voxels
and the output voxels they contribute to.
"""
import torch
from torch import nn


class SparseConvFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feats, weights, kmap, n_out):
        in_idx, out_idx = kmap
        out = feats.new_zeros(n_out, weights[0].size(1))
        for k, w in enumerate(weights):
            out.index_add_(0, out_idx[k], feats.index_select(0, in_idx[k]) @ w)
        ctx.save_for_backward(feats, in_idx, out_idx, *weights)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        feats, in_idx, out_idx, *weights = ctx.saved_tensors
        grad_feats = torch.zeros_like(feats)
        grad_ws = []
        for k, w in enumerate(weights):
            g = grad_out.index_select(0, out_idx[k])
            grad_feats.index_add_(0, in_idx[k], g @ w.t())
            grad_ws.append(feats.index_select(0, in_idx[k]).t() @ g)
        return grad_feats, grad_ws, None, None


class SubmanifoldConv(nn.Module):
    """A 2-offset toy kernel: the voxel itself and its +x neighbour."""

    def __init__(self, cin, cout):
        super().__init__()
        self.w_center = nn.Parameter(torch.randn(cin, cout) * 0.1)
        self.w_neighbor = nn.Parameter(torch.randn(cin, cout) * 0.1)

    def forward(self, feats, in_idx, out_idx):
        ws = [self.w_center, self.w_neighbor]
        return SparseConvFn.apply(feats, ws, (in_idx, out_idx), feats.size(0))


def run():
    torch.manual_seed(0)
    conv = SubmanifoldConv(3, 2).double()
    feats = torch.randn(6, 3, dtype=torch.double, requires_grad=True)
    in_idx = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 5]])
    out_idx = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 4]])
    out = conv(feats, in_idx, out_idx)
    return out.detach(), out.requires_grad
