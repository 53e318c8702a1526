"""In-place point-cloud and graph kernels written as autograd Functions.

Memory-tight layers for large scans: several ops write into the tensors they are given instead of
allocating new ones, and some of them forget to tell autograd.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import InplaceFunction


class CenterPoints(torch.autograd.Function):
    """Moves every cloud to its centroid; the caller keeps using xyz for the neighbour search."""

    @staticmethod
    def forward(ctx, xyz, centroid):
        xyz.sub_(centroid.unsqueeze(1))
        return xyz

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, -grad_out.sum(1)


class CenterPointsCopy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xyz, centroid):
        xyz = xyz.clone()
        xyz.sub_(centroid.unsqueeze(1))
        return xyz

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, -grad_out.sum(1)


class EdgeSoftmax(torch.autograd.Function):
    """Softmax over the incoming edges of each node, computed in the score buffer."""

    @staticmethod
    def forward(ctx, scores, dst, num_nodes):
        smax = scores.new_full((num_nodes,), float("-inf")).scatter_reduce(0, dst, scores, "amax")
        scores.sub_(smax[dst])
        scores.exp_()
        denom = scores.new_zeros(num_nodes).index_add_(0, dst, scores)
        out = scores / denom[dst]
        ctx.save_for_backward(out, dst)
        ctx.num_nodes = num_nodes
        return out

    @staticmethod
    def backward(ctx, grad_out):
        out, dst = ctx.saved_tensors
        weighted = grad_out * out
        total = torch.bincount(dst, weights=weighted, minlength=ctx.num_nodes).to(weighted.dtype)
        return weighted - out * total[dst], None, None


class RunningPointStats(torch.autograd.Function):
    """Normalizes features and updates the running statistics, which are buffers."""

    @staticmethod
    def forward(ctx, feats, running_mean, running_var, momentum, eps):
        mean = feats.mean(0)
        var = feats.var(0, unbiased=False)
        running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        running_var.mul_(1 - momentum).add_(var, alpha=momentum)
        inv_std = torch.rsqrt(var + eps)
        out = (feats - mean) * inv_std
        ctx.save_for_backward(out, inv_std)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        out, inv_std = ctx.saved_tensors
        n = grad_out.size(0)
        grad_in = inv_std / n * (n * grad_out - grad_out.sum(0) - out * (grad_out * out).sum(0))
        return grad_in, None, None, None, None


class DropEdgeWeight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, edge_weight, p):
        keep = torch.rand_like(edge_weight) >= p
        edge_weight[~keep] = 0
        edge_weight /= 1 - p
        ctx.p = p
        ctx.save_for_backward(keep)
        return edge_weight.view_as(edge_weight)

    @staticmethod
    def backward(ctx, grad_out):
        (keep,) = ctx.saved_tensors
        return grad_out * keep / (1 - ctx.p), None


class GatedResidual(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, residual, gate):
        half = h.size(1) // 2
        left = h[:, :half]
        F.relu(left, inplace=True)
        torch.add(residual, h * gate, out=residual)
        ctx.save_for_backward(h, gate)
        return residual

    @staticmethod
    def backward(ctx, grad_out):
        h, gate = ctx.saved_tensors
        return grad_out * gate, grad_out, (grad_out * h).sum(0)


class ScaleShiftInplace(torch.autograd.Function):
    @staticmethod
    def forward(x, scale, shift):
        return x.mul_(scale).add_(shift)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale, shift = inputs
        ctx.mark_dirty(x)
        ctx.save_for_backward(scale)

    @staticmethod
    def backward(ctx, grad_out):
        (scale,) = ctx.saved_tensors
        return grad_out * scale, None, None


class ClampFeatures(torch.autograd.Function):
    @staticmethod
    def forward(feats: torch.Tensor, bound: float):
        mask = feats.abs() <= bound
        feats.clamp_(-bound, bound)
        return feats, mask

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, mask = output
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(mask)

    @staticmethod
    def backward(ctx, grad_out, grad_mask):
        (mask,) = ctx.saved_tensors
        return grad_out * mask, None


class AddSelfLoops(torch.autograd.Function):
    @staticmethod
    def forward(ctx, adj_values, diag_index, fill):
        ctx.nnz = adj_values.numel()
        adj_values[diag_index] += fill
        return adj_values.view_as(adj_values)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, None, None


class SoftAssign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, temperature, inplace=False):
        if inplace:
            ctx.mark_dirty(logits)
        else:
            logits = logits.clone()
        logits.div_(temperature)
        probs = torch.softmax(logits, dim=-1)
        ctx.temperature = float(temperature)
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, grad_out):
        (probs,) = ctx.saved_tensors
        inner = (grad_out * probs).sum(-1, keepdim=True)
        return probs * (grad_out - inner) / ctx.temperature, None, None


class FarthestPointSample(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xyz, npoint):
        xyz = xyz.contiguous()
        batch_size, num_points, _ = xyz.shape
        dist = torch.full((batch_size, num_points), 1e10, device=xyz.device)
        idx = torch.zeros(batch_size, npoint, dtype=torch.long, device=xyz.device)
        farthest = torch.zeros(batch_size, dtype=torch.long, device=xyz.device)
        batch = torch.arange(batch_size, device=xyz.device)
        for i in range(npoint):
            idx[:, i] = farthest
            centroid = xyz[batch, farthest].unsqueeze(1)
            dist = torch.minimum(dist, ((xyz - centroid) ** 2).sum(-1))
            farthest = dist.argmax(-1)
        ctx.mark_non_differentiable(idx)
        return idx

    @staticmethod
    def backward(ctx, grad_idx):
        return None, None


class Hardtanh(InplaceFunction):
    @staticmethod
    def forward(ctx, input, lo, hi, inplace=False):
        if inplace:
            output = input.clamp_(lo, hi)
        else:
            output = input.clamp(lo, hi)
        ctx.save_for_backward((output > lo) & (output < hi))
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (mask,) = ctx.saved_tensors
        return grad_output * mask, None, None, None


class LeakyReLUInplace(InplaceFunction):
    @staticmethod
    def forward(ctx, input, negative_slope=0.01, inplace=False):
        ctx.negative_slope = negative_slope
        positive = input >= 0
        if inplace:
            ctx.mark_dirty(input)
            output = input.mul_(torch.where(positive, 1.0, negative_slope))
        else:
            output = torch.where(positive, input, input * negative_slope)
        ctx.save_for_backward(positive)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (positive,) = ctx.saved_tensors
        return torch.where(positive, grad_output, grad_output * ctx.negative_slope), None, None


class PointBlock(nn.Module):
    """The layer that strings them together; its own in-place ops are tracked by autograd."""

    def __init__(self, channels):
        super().__init__()
        self.proj = nn.Linear(channels, channels)
        self.gate = nn.Parameter(torch.ones(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, xyz, feats, centroid):
        xyz = CenterPoints.apply(xyz, centroid)
        h = self.proj(feats)
        F.relu_(h)
        h = RunningPointStats.apply(h, self.running_mean, self.running_var, 0.1, 1e-5)
        h = GatedResidual.apply(h, feats.clone(), self.gate)
        return xyz, Hardtanh.apply(h, -3.0, 3.0, True)
