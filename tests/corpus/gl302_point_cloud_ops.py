"""Point-cloud ops (PointNet++ / voxel pooling) with custom backwards."""
import torch
import torch.nn.functional as F

from . import _pointops_cuda as pointops


class ThreeInterpolate(torch.autograd.Function):
    """out[b, c, n] = sum_j weight[b, n, j] * feat[b, c, idx[b, n, j]] over the 3 nearest known points."""

    @staticmethod
    def forward(ctx, feat, idx, weight):
        b, c, m = feat.shape
        n = idx.size(1)
        gathered = feat.gather(2, idx.reshape(b, 1, n * 3).expand(b, c, n * 3)).view(b, c, n, 3)
        ctx.save_for_backward(idx, weight)
        ctx.num_known = m
        return (gathered * weight.unsqueeze(1)).sum(-1)

    @staticmethod
    def backward(ctx, grad_out):
        idx, weight = ctx.saved_tensors
        b, c, n = grad_out.shape
        spread = (grad_out.unsqueeze(-1) * weight.unsqueeze(1)).reshape(b, c, n * 3)
        grad_feat = grad_out.new_zeros(b, c, ctx.num_known)
        grad_feat.scatter_add_(2, idx.reshape(b, 1, n * 3).expand(b, c, n * 3), spread)
        return grad_feat, None, None


class GroupPoints(torch.autograd.Function):
    """Ball-query grouping: out[b, c, p, s] = feat[b, c, idx[b, p, s]]."""

    @staticmethod
    def forward(ctx, feat, idx):
        b, c, n = feat.shape
        p, s = idx.shape[1:]
        out = feat.gather(2, idx.reshape(b, 1, p * s).expand(b, c, p * s)).view(b, c, p, s)
        ctx.save_for_backward(idx)
        ctx.num_points = n
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (idx,) = ctx.saved_tensors
        b, c, p, s = grad_out.shape
        flat = idx.reshape(b, 1, p * s).expand(b, c, p * s)
        grad_feat = torch.zeros(b, c, ctx.num_points, device=grad_out.device, dtype=grad_out.dtype)
        grad_feat = torch.Tensor.scatter_add(grad_feat, 2, flat, grad_out.reshape(b, c, p * s))
        return grad_feat, None


class GroupPointsKernel(torch.autograd.Function):
    """The same grouping through the compiled point ops."""

    @staticmethod
    def forward(ctx, feat, idx):
        ctx.save_for_backward(idx)
        ctx.num_points = feat.size(2)
        return pointops.group_points(feat, idx)

    @staticmethod
    def backward(ctx, grad_out):
        (idx,) = ctx.saved_tensors
        grad_feat = pointops.group_points_grad_atomic_add(grad_out.contiguous(), idx, ctx.num_points)
        return grad_feat, None


class VoxelMeanPool(torch.autograd.Function):
    """Average the points of each occupied voxel (sparse-conv front ends)."""

    @staticmethod
    def forward(ctx, feat, voxel_id, num_voxels):
        count = torch.zeros(num_voxels, dtype=torch.long, device=feat.device)
        count.index_add_(0, voxel_id, torch.ones_like(voxel_id))
        total = feat.new_zeros(num_voxels, feat.size(1)).index_add_(0, voxel_id, feat)
        inv = count.clamp(min=1).float().reciprocal()
        ctx.save_for_backward(voxel_id, inv)
        return total * inv.unsqueeze(-1)

    @staticmethod
    def backward(ctx, grad_out):
        voxel_id, inv = ctx.saved_tensors
        return (grad_out * inv.unsqueeze(-1))[voxel_id], None, None


class VoxelScatterMean(torch.autograd.Function):
    """Voxel features shared out to their points, divided by the voxel's point count."""

    @staticmethod
    def forward(ctx, voxel_feat, voxel_id):
        count = torch.bincount(voxel_id, minlength=voxel_feat.size(0)).clamp(min=1)
        ctx.save_for_backward(voxel_id)
        ctx.num_voxels = voxel_feat.size(0)
        return voxel_feat[voxel_id] / count[voxel_id].unsqueeze(-1).to(voxel_feat.dtype)

    @staticmethod
    def backward(ctx, grad_points):
        (voxel_id,) = ctx.saved_tensors
        occupied = torch.zeros(ctx.num_voxels, device=grad_points.device)
        occupied.index_put_((voxel_id,), torch.ones_like(voxel_id, dtype=occupied.dtype), accumulate=True)
        grad_voxel = grad_points.new_zeros(ctx.num_voxels, grad_points.size(1))
        grad_voxel.index_put_((voxel_id,), grad_points, accumulate=True)
        return grad_voxel / occupied.clamp(min=1).unsqueeze(-1), None


class FarthestPointFeatures(torch.autograd.Function):
    """Features of sampled points; each sample is a distinct point, so the backward copies."""

    @staticmethod
    def forward(ctx, feat, sample_idx):
        ctx.save_for_backward(sample_idx)
        ctx.num_points = feat.size(1)
        return feat[:, sample_idx]

    @staticmethod
    def backward(ctx, grad_out):
        (sample_idx,) = ctx.saved_tensors
        grad_feat = grad_out.new_zeros(grad_out.size(0), ctx.num_points, grad_out.size(2))
        grad_feat.index_put_((torch.arange(grad_out.size(0))[:, None], sample_idx), grad_out)
        return grad_feat, None


class PointDensity(torch.autograd.Function):
    """Soft occupancy per cell: sum over points of a Gaussian of the distance to the cell centre."""

    @staticmethod
    def forward(ctx, pos, cell, centres, sigma: float):
        d2 = (pos - centres[cell]).pow(2).sum(-1)
        w = torch.exp(-d2 / (2 * sigma * sigma))
        density = pos.new_zeros(centres.size(0)).index_add_(0, cell, w)
        ctx.save_for_backward(pos, cell, centres, w)
        ctx.sigma = sigma
        return density

    @staticmethod
    def backward(ctx, grad_density):
        pos, cell, centres, w = ctx.saved_tensors
        coef = (grad_density[cell] * w / (ctx.sigma * ctx.sigma)).unsqueeze(-1)
        diff = pos - centres[cell]
        grad_pos = -coef * diff
        grad_centres = torch.zeros_like(centres).scatter_reduce_(
            0, cell.unsqueeze(-1).expand_as(diff), coef * diff, reduce="sum", include_self=True)
        return grad_pos, None, grad_centres, None


class FeaturePropagation(torch.nn.Module):
    """Upsampling with ThreeInterpolate, then a shared MLP."""

    def __init__(self, channels):
        super().__init__()
        self.mlp = torch.nn.Conv1d(channels, channels, 1)

    def forward(self, feat, idx, weight):
        return F.relu(self.mlp(ThreeInterpolate.apply(feat, idx, weight)))
