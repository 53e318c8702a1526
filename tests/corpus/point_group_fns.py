"""Grouping and interpolation Functions for PointNet++-style set abstraction."""
import torch
import torch.nn as nn
from torch.autograd import Function


class GroupPoints(Function):
    """feats (B, C, N), idx (B, M, K) -> grouped (B, C, M, K)."""

    @staticmethod
    def forward(ctx, feats, idx):
        b, c, n = feats.shape
        flat = idx.reshape(b, 1, -1).expand(-1, c, -1)
        out = feats.gather(2, flat).view(b, c, *idx.shape[1:])
        ctx.num_points = n
        ctx.save_for_backward(idx.int())
        if feats.requires_grad:
            ctx.save_for_backward(idx.int(), flat.int())
        return out

    @staticmethod
    def backward(ctx, grad_out):
        idx, flat = ctx.saved_tensors
        b, c = grad_out.shape[:2]
        grad = grad_out.new_zeros(b, c, ctx.num_points)
        grad.scatter_add_(2, flat.long(), grad_out.reshape(b, c, -1))
        return grad, None


class ThreeInterpolate(Function):
    @staticmethod
    def forward(feats, idx, weight):
        picked = torch.stack([feats.gather(2, idx[..., j].unsqueeze(1).expand(-1, feats.size(1), -1)) for j in range(3)], -1)
        return (picked * weight.unsqueeze(1)).sum(-1)

    def setup_context(ctx, inputs, output):
        feats, idx, weight = inputs
        ctx.num_points = feats.size(2)
        ctx.save_for_backward(idx)
        ctx.save_for_backward(idx, weight)

    @staticmethod
    def backward(ctx, grad_out):
        idx, weight = ctx.saved_tensors
        b, c, m = grad_out.shape
        grad = grad_out.new_zeros(b, c, ctx.num_points)
        for j in range(3):
            src = grad_out * weight[..., j].unsqueeze(1)
            grad.scatter_add_(2, idx[..., j].long().unsqueeze(1).expand(-1, c, -1), src)
        return grad, None, None

    def jvp(ctx, d_feats, d_idx, d_weight):
        idx, weight = ctx.saved_tensors
        return ThreeInterpolate.apply(d_feats, idx, weight)


class MultiScaleGroup(Function):
    @staticmethod
    def forward(ctx, feats, idx_small, idx_large):
        ctx.save_for_backward(idx_small)
        outs = []
        for idx in (idx_small, idx_large):
            outs.append(GroupPoints.forward(ctx, feats, idx))
            ctx.save_for_backward(idx)
        ctx.num_points = feats.size(2)
        return torch.cat(outs, dim=-1)

    @staticmethod
    def backward(ctx, grad_out):
        return None, None, None


class KNNInterpolate(Function):
    """Inverse-distance interpolation from `known` points onto `unknown` points."""

    @staticmethod
    def forward(ctx, unknown, known, known_feats, k=3):
        dist, idx = torch.cdist(unknown, known).topk(k, dim=-1, largest=False)
        weight = 1.0 / dist.clamp_min(1e-8)
        weight = weight / weight.sum(-1, keepdim=True)
        if k == 1:
            ctx.save_for_backward(idx.int())
        elif known_feats.requires_grad:
            ctx.save_for_backward(idx.int(), weight)
        else:
            ctx.save_for_backward(idx.int(), weight.detach())
        ctx.k = k
        return ThreeInterpolate.forward(known_feats, idx, weight)

    @staticmethod
    def backward(ctx, grad_out):
        return None, None, None, None


class SetAbstraction(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv2d(in_dim, out_dim, 1), nn.ReLU())
        self.group = GroupPoints()

    def forward(self, feats, idx, idx_coarse=None):
        if idx_coarse is None:
            grouped = GroupPoints.apply(feats, idx)
        else:
            grouped = MultiScaleGroup.apply(feats, (idx, idx_coarse))
        return self.mlp(grouped).amax(dim=-1)
