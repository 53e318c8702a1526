"""kNN message passing on a point cloud, written the way that leaks memory.

Run `gradlint check examples/knn_scatter_leaky.py` to see what is wrong with it,
and compare with knn_scatter_clean.py. It also runs: `python examples/knn_scatter_leaky.py`
(the backward fails with torch's "returned an incorrect number of gradients" error).
"""
import torch
from torch import nn


class KNNScatter(torch.autograd.Function):
    """For every point, average the features of its k nearest neighbours (by position)."""

    @staticmethod
    def forward(ctx, feat, pos, k):
        # feat: [N, C], pos: [N, 3]
        knn = torch.cdist(pos, pos).topk(k, dim=-1, largest=False).indices  # [N, k], int64
        n, c = feat.shape
        out = feat.index_select(0, knn.reshape(-1)).view(n, k, c).mean(dim=1)
        ctx.k = k
        ctx.save_for_backward(knn)  # GL301: int64 index saved (8 bytes per element)
        ctx.out = out  # GL101: the Function's own output -> reference cycle
        ctx.first_half = out[: n // 2]  # GL101: a view of the output -> never freed
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (knn,) = ctx.saved_tensors
        n, c = grad_out.shape
        grad_rows = (grad_out / ctx.k).repeat_interleave(ctx.k, dim=0)
        grad_feat = grad_out.new_zeros(n, c).index_add_(0, knn.reshape(-1), grad_rows)
        return grad_feat  # GL201: 1 gradient for 3 forward inputs


class KNNBlock(nn.Module):
    def __init__(self, dim, k=16):
        super().__init__()
        self.k = k
        self.lin = nn.Linear(2 * dim, dim)

    def forward(self, feat, pos):
        agg = KNNScatter.apply(feat, pos, self.k)
        return feat + torch.relu(self.lin(torch.cat([feat, agg], dim=-1)))


if __name__ == "__main__":
    torch.manual_seed(0)
    block = KNNBlock(32)
    feat = torch.randn(256, 32, requires_grad=True)
    pos = torch.randn(256, 3)
    out = block(feat, pos)
    try:
        out.sum().backward()
    except RuntimeError as exc:
        print("backward failed:", exc)
