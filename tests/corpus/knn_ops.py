"""k-nearest-neighbour gathers for point clouds (DGCNN / PointNet++ style)."""
import torch as th
from torch import nn


class KNNGather(th.autograd.Function):
    """out[b, i, j] = feat[b, knn[b, i, j]] with knn the k nearest points of i."""

    @staticmethod
    def forward(ctx, feat, pos, k):
        # feat: [B, N, C], pos: [B, N, 3]
        dist = th.cdist(pos, pos)
        knn = dist.topk(k, dim=-1, largest=False).indices
        b, n, c = feat.shape
        flat = knn.reshape(b, n * k, 1).expand(b, n * k, c)
        out = th.gather(feat, 1, flat).view(b, n, k, c)
        ctx.k = k
        ctx.feat_shape = feat.shape
        ctx.save_for_backward(knn)
        ctx.out = out
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (knn,) = ctx.saved_tensors
        b, n, c = ctx.feat_shape
        idx = knn.reshape(b, n * ctx.k, 1).expand(b, n * ctx.k, c)
        grad_feat = grad_out.new_zeros(b, n, c)
        grad_feat.scatter_add_(1, idx, grad_out.reshape(b, n * ctx.k, c))
        return grad_feat, None, None, None


class KNNGatherCompact(th.autograd.Function):
    """Same gather, but the caller computes the neighbours once per layer stack."""

    @staticmethod
    def forward(ctx, feat, knn_idx):
        b, n, k = knn_idx.shape
        c = feat.size(-1)
        idx = knn_idx.reshape(b, n * k, 1).expand(b, n * k, c)
        out = th.gather(feat, 1, idx).view(b, n, k, c)
        ctx.save_for_backward(knn_idx.to(th.int32))
        ctx.num_points = feat.size(1)
        ctx.k = k
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (knn32,) = ctx.saved_tensors
        b, n, k, c = grad_out.shape
        idx = knn32.long().reshape(b, n * k, 1).expand(b, n * k, c)
        grad_feat = grad_out.new_zeros(b, ctx.num_points, c)
        grad_feat.scatter_add_(1, idx, grad_out.reshape(b, n * k, c))
        return grad_feat, None


class EdgeFeature(th.autograd.Function):
    """DGCNN edge features: concat(x_j - x_i, x_i) over the k neighbours j of i."""

    @staticmethod
    def forward(ctx, feat, knn_idx):
        b, n, k = knn_idx.shape
        c = feat.size(-1)
        idx = knn_idx.reshape(b, n * k, 1).expand(b, n * k, c)
        nbr = th.gather(feat, 1, idx).view(b, n, k, c)
        center = feat.unsqueeze(2).expand(b, n, k, c)
        out = th.cat([nbr - center, center], dim=-1)
        ctx.center = out[..., c:]
        ctx.c = c
        ctx.save_for_backward(knn_idx)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (knn_idx,) = ctx.saved_tensors
        c = ctx.c
        b, n, k = knn_idx.shape
        g_diff, g_center = grad_out[..., :c], grad_out[..., c:]
        grad_feat = (g_center - g_diff).sum(2)
        idx = knn_idx.reshape(b, n * k, 1).expand(b, n * k, c)
        grad_feat.scatter_add_(1, idx, g_diff.reshape(b, n * k, c))
        return grad_feat, None


class KNNMaxPool(th.autograd.Function):
    """Channel-wise max over the k nearest neighbours; the winners are kept as int32."""

    @staticmethod
    def forward(ctx, feat, pos, k):
        knn = th.cdist(pos, pos).topk(k, dim=-1, largest=False).indices
        b, n, c = feat.shape
        nbr = th.gather(feat, 1, knn.reshape(b, n * k, 1).expand(b, n * k, c)).view(b, n, k, c)
        out, arg = nbr.max(dim=2)
        ctx.save_for_backward(knn.to(th.int32), arg.int())
        ctx.num_points = n
        return out

    @staticmethod
    def backward(ctx, grad_out):
        knn32, arg32 = ctx.saved_tensors
        winner = th.gather(knn32.long(), 2, arg32.long())
        grad_feat = grad_out.new_zeros(grad_out.size(0), ctx.num_points, grad_out.size(-1))
        grad_feat.scatter_add_(1, winner, grad_out)
        return grad_feat, None, None


class EdgeConv(nn.Module):
    def __init__(self, in_ch, out_ch, k=20):
        super().__init__()
        self.k = k
        self.mlp = nn.Sequential(nn.Linear(2 * in_ch, out_ch), nn.LeakyReLU(0.2))

    def forward(self, feat, pos):
        knn = th.cdist(pos, pos).topk(self.k, dim=-1, largest=False).indices
        edge = EdgeFeature.apply(feat, knn)
        return self.mlp(edge).max(dim=2).values


class DGCNNBackbone(nn.Module):
    def __init__(self, in_ch=3, widths=(64, 64, 128, 256), k=20):
        super().__init__()
        chans = (in_ch,) + tuple(widths)
        self.convs = nn.ModuleList(EdgeConv(chans[i], chans[i + 1], k) for i in range(len(widths)))
        self.fuse = nn.Linear(sum(widths), 1024)

    def forward(self, pos):
        feat = pos
        outs = []
        for conv in self.convs:
            feat = conv(feat, pos)
            outs.append(feat)
        return self.fuse(th.cat(outs, dim=-1)).max(dim=1).values
