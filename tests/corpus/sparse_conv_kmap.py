"""Submanifold sparse 3D convolution over a voxel hash (sorted int64 keys + searchsorted), reference impl."""
import itertools

import torch
import torch.nn as nn
from torch.autograd import Function

_R = 1 << 16


def _hash(coords):
    # coords (N, 4) int32: batch, x, y, z (non-negative)
    c = coords.long()
    return ((c[:, 0] * _R + c[:, 1]) * _R + c[:, 2]) * _R + c[:, 3]


@torch.no_grad()
def build_kernel_map(coords, ksize=3):
    keys = _hash(coords)
    sorted_keys, order = torch.sort(keys)
    in_idx, out_idx, counts = [], [], []
    r = ksize // 2
    for dx, dy, dz in itertools.product(range(-r, r + 1), repeat=3):
        off = torch.tensor([0, dx, dy, dz], dtype=coords.dtype, device=coords.device)
        q = _hash((coords + off).clamp_(min=0))
        pos = torch.searchsorted(sorted_keys, q).clamp_(max=len(keys) - 1)
        hit = sorted_keys[pos] == q
        in_idx.append(order[pos[hit]].int())
        out_idx.append(hit.nonzero().squeeze(1).int())
        counts.append(int(hit.sum()))
    return torch.cat(in_idx), torch.cat(out_idx), counts


class SubMConv3dFunction(Function):
    @staticmethod
    def forward(ctx, feats, weight, kmap, num_out):
        # feats (N, Cin), weight (K, Cin, Cout); kmap = (in_idx int32, out_idx int32, per-offset counts)
        in_idx, out_idx, counts = kmap
        out = feats.new_zeros(num_out, weight.shape[2])
        start = 0
        for k, n in enumerate(counts):
            if n:
                i, o = in_idx[start:start + n].long(), out_idx[start:start + n].long()
                out.index_add_(0, o, feats[i] @ weight[k])
            start += n
        ctx.save_for_backward(feats, weight, in_idx, out_idx)
        ctx.counts = counts
        return out

    @staticmethod
    def backward(ctx, grad_out):
        feats, weight, in_idx, out_idx = ctx.saved_tensors
        grad_feats = torch.zeros_like(feats)
        grad_w = torch.zeros_like(weight)
        start = 0
        for k, n in enumerate(ctx.counts):
            if n:
                i, o = in_idx[start:start + n].long(), out_idx[start:start + n].long()
                g = grad_out[o]
                grad_feats.index_add_(0, i, g @ weight[k].t())
                grad_w[k] = feats[i].t() @ g
            start += n
        return grad_feats, grad_w, None, None


class SubMConv3d(nn.Module):
    def __init__(self, cin, cout, ksize=3):
        super().__init__()
        self.ksize = ksize
        self.weight = nn.Parameter(torch.randn(ksize ** 3, cin, cout) * (cin * ksize ** 3) ** -0.5)

    def forward(self, feats, coords):
        in_idx, out_idx, counts = build_kernel_map(coords, self.ksize)
        kmap = (in_idx, out_idx, counts)
        return SubMConv3dFunction.apply(feats, self.weight, kmap, feats.shape[0])


if __name__ == "__main__":
    torch.manual_seed(0)
    coords = torch.unique(torch.randint(0, 6, (40, 4), dtype=torch.int32), dim=0)
    coords[:, 0] = 0
    coords = torch.unique(coords, dim=0)
    f = torch.randn(len(coords), 3, dtype=torch.double, requires_grad=True)
    w = torch.randn(27, 3, 2, dtype=torch.double, requires_grad=True)
    km = build_kernel_map(coords)
    print(torch.autograd.gradcheck(lambda a, b: SubMConv3dFunction.apply(a, b, km, len(coords)), (f, w)))
