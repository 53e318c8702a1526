"""Fused ops for a point-voxel detector head; several write into caller-provided tensors to save memory."""
import torch
from torch.autograd import Function


class PointsToVoxelAccum(Function):
    """Scatter point features into a caller-provided dense voxel grid (accumulate)."""

    @staticmethod
    def forward(ctx, point_feats, voxel_idx, grid):
        grid.index_put_((voxel_idx,), point_feats, accumulate=True)
        ctx.save_for_backward(voxel_idx)
        return grid

    @staticmethod
    def backward(ctx, grad_grid):
        (voxel_idx,) = ctx.saved_tensors
        return grad_grid[voxel_idx], None, grad_grid


class MaskedSoftmax(Function):
    @staticmethod
    def forward(ctx, scores, valid):
        scores.masked_fill_(~valid, float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num_(0.0)
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        return p * (g - (g * p).sum(-1, keepdim=True)), None


class ResidualAdd(Function):
    @staticmethod
    def forward(ctx, x, branch):
        torch.add(x, branch, out=x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, g


class BatchStatNorm(Function):
    """Normalise with batch stats and update running stats in place (running_mean needs no grad)."""

    @staticmethod
    def forward(ctx, x, running_mean, running_var, momentum, eps):
        mean, var = x.mean(0), x.var(0, unbiased=False)
        running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        running_var.mul_(1 - momentum).add_(var, alpha=momentum)
        rstd = torch.rsqrt(var + eps)
        xhat = (x - mean) * rstd
        ctx.save_for_backward(xhat, rstd)
        return xhat

    @staticmethod
    def backward(ctx, g):
        xhat, rstd = ctx.saved_tensors
        gx = rstd * (g - g.mean(0) - xhat * (g * xhat).mean(0))
        return gx, None, None, None, None


class ClampBoxes(Function):
    """Clamp decoded boxes to the image; straight-through gradient."""

    @staticmethod
    def forward(ctx, boxes, h, w):
        boxes[:, 0::2].clamp_(0, w)
        boxes[:, 1::2].clamp_(0, h)
        return boxes.clone()

    @staticmethod
    def backward(ctx, g):
        return g, None, None


def voxel_head(point_feats, voxel_idx, n_vox, branch):
    grid = point_feats.new_zeros(n_vox, point_feats.shape[1])
    grid = PointsToVoxelAccum.apply(point_feats, voxel_idx, grid)
    return ResidualAdd.apply(grid, branch)


if __name__ == "__main__":
    pf = torch.randn(10, 4, requires_grad=True)
    vi = torch.randint(0, 5, (10,))
    br = torch.randn(5, 4, requires_grad=True)
    out = voxel_head(pf * 1, vi, 5, br)
    out.sum().backward()
    print(pf.grad.sum(), br.grad.sum())
    s = torch.randn(2, 4, requires_grad=True)
    x = s * 1.0
    p = MaskedSoftmax.apply(x, torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1]], dtype=torch.bool))
    (p.sum() + x.sum()).backward()
    print(s.grad)
