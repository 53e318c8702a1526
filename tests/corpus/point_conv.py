"""PointNet++ set abstraction with ball-query grouping."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BallQueryGroup(torch.autograd.Function):
    """Group the `nsample` nearest points within `radius` of every center."""

    @staticmethod
    def forward(ctx, feat, pos, centers, radius: float, nsample: int):
        d = torch.cdist(centers, pos)
        d = d.masked_fill(d > radius, float("inf"))
        group_idx = d.topk(nsample, dim=-1, largest=False)[1]
        b, m, s = group_idx.shape
        c = feat.size(-1)
        flat = group_idx.reshape(b, m * s, 1).expand(b, m * s, c)
        grouped = torch.gather(feat, 1, flat).view(b, m, s, c)
        ctx.num_points = pos.size(1)
        ctx.save_for_backward(group_idx)
        return grouped

    @staticmethod
    def backward(ctx, grad_grouped):
        (group_idx,) = ctx.saved_tensors
        b, m, s, c = grad_grouped.shape
        flat = group_idx.reshape(b, m * s, 1).expand(b, m * s, c)
        grad_feat = grad_grouped.new_zeros(b, ctx.num_points, c)
        grad_feat.scatter_add_(1, flat, grad_grouped.reshape(b, m * s, c))
        grads = (grad_feat, None, None)
        return grads


class RandomSubsample(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feat, num_samples: int):
        b, n, c = feat.shape
        idx = torch.randint(0, n, (b, num_samples), device=feat.device)
        ctx.save_for_backward(idx)
        ctx.n = n
        return torch.gather(feat, 1, idx.unsqueeze(-1).expand(-1, -1, c))

    @staticmethod
    def backward(ctx, grad_out):
        (idx,) = ctx.saved_tensors
        c = grad_out.size(-1)
        grad = grad_out.new_zeros(grad_out.size(0), ctx.n, c)
        grad.scatter_add_(1, idx.unsqueeze(-1).expand(-1, -1, c), grad_out)
        return grad, None


class WSLinear(nn.Module):
    """Linear layer with weight standardisation (helps with small point-cloud batches)."""

    def __init__(self, in_f, out_f):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_f, in_f))
        self.bias = nn.Parameter(torch.zeros(out_f))
        nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        self.cached_weight = None

    def forward(self, x):
        w = self.weight
        w = (w - w.mean(1, keepdim=True)) / (w.std(1, keepdim=True) + 1e-5)
        self.cached_weight = w
        return F.linear(x, w, self.bias)


class SetAbstraction(nn.Module):
    def __init__(self, npoint, radii, nsamples, in_ch, mlps, keep_intermediate=False):
        super().__init__()
        self.npoint = npoint
        self.radii = radii
        self.nsamples = nsamples
        self.branches = nn.ModuleList()
        for widths in mlps:
            layers, c = [], in_ch + 3
            for w in widths:
                layers += [nn.Linear(c, w), nn.LayerNorm(w), nn.ReLU()]
                c = w
            self.branches.append(nn.Sequential(*layers))
        out_ch = sum(widths[-1] for widths in mlps)
        self.fuse = nn.Linear(out_ch, out_ch)
        self.keep_intermediate = keep_intermediate
        self.intermediates = []
        self.last_group_idx = None

    def forward(self, feat, pos):
        b, n, _ = pos.shape
        centers_idx = torch.randperm(n, device=pos.device)[: self.npoint]
        centers = pos[:, centers_idx]
        outs = []
        for radius, nsample, mlp in zip(self.radii, self.nsamples, self.branches):
            grouped_feat = BallQueryGroup.apply(feat, pos, centers, radius, nsample)
            grouped_pos = BallQueryGroup.apply(pos, pos, centers, radius, nsample) - centers.unsqueeze(2)
            new_feat = mlp(torch.cat([grouped_feat, grouped_pos], dim=-1)).max(dim=2).values
            outs.append(new_feat)
        fused = self.fuse(torch.cat(outs, dim=-1))
        if self.keep_intermediate:
            self.intermediates.append(fused)
        self.last_group_idx = centers_idx
        return fused, centers


class PointNet2Cls(nn.Module):
    def __init__(self, num_classes=40):
        super().__init__()
        self.sa1 = SetAbstraction(512, [0.1, 0.2], [16, 32], 0, [[32, 64], [64, 128]])
        self.sa2 = SetAbstraction(128, [0.2, 0.4], [32, 64], 192, [[128, 256], [128, 256]])
        self.head = nn.Sequential(WSLinear(512, 256), nn.ReLU(), nn.Dropout(0.4), nn.Linear(256, num_classes))

    def forward(self, pos):
        feat = pos.new_zeros(pos.size(0), pos.size(1), 0)
        feat, pos = self.sa1(feat, pos)
        feat, pos = self.sa2(feat, pos)
        return self.head(feat.max(dim=1).values)
