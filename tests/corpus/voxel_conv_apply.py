"""Sparse voxel conv op: how the layers call it."""
from typing import Tuple

import torch
import torch.nn as nn


class VoxelConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feats, nbr_map, weight, kernel_size: Tuple[int, int, int], stride: int):
        # feats: [N, Cin]; nbr_map: [N, K] (-1 = missing); weight: [K, Cin, Cout]
        K = nbr_map.size(1)
        valid = nbr_map >= 0
        gathered = feats[nbr_map.clamp(min=0)] * valid.unsqueeze(-1)   # [N, K, Cin]
        out = torch.einsum("nkc,kco->no", gathered, weight)
        ctx.save_for_backward(feats, nbr_map, weight)
        ctx.kernel_size, ctx.stride = kernel_size, stride
        return out

    @staticmethod
    def backward(ctx, grad_out):
        feats, nbr_map, weight = ctx.saved_tensors
        valid = nbr_map >= 0
        safe = nbr_map.clamp(min=0)
        gathered = feats[safe] * valid.unsqueeze(-1)
        grad_w = torch.einsum("nkc,no->kco", gathered, grad_out) if ctx.needs_input_grad[2] else None
        grad_feats = None
        if ctx.needs_input_grad[0]:
            per_nbr = torch.einsum("no,kco->nkc", grad_out, weight) * valid.unsqueeze(-1)
            grad_feats = torch.zeros_like(feats)
            grad_feats.index_put_((safe.flatten(),), per_nbr.flatten(0, 1), accumulate=True)
        return grad_feats, None, grad_w, None, None


voxel_conv = VoxelConv.apply


class SparseConv3d(nn.Module):
    def __init__(self, cin, cout, kernel_size=(3, 3, 3), stride=1):
        super().__init__()
        self.kernel_size, self.stride = tuple(kernel_size), stride
        k = kernel_size[0] * kernel_size[1] * kernel_size[2]
        self.weight = nn.Parameter(torch.randn(k, cin, cout) * (k * cin) ** -0.5)

    def forward(self, feats, nbr_map):
        return VoxelConv.apply(feats, nbr_map, self.weight, (3, 3, 3), self.stride)


class MultiBranch(nn.Module):
    def __init__(self, cin, cout, branches=2):
        super().__init__()
        self.convs = nn.ModuleList(SparseConv3d(cin, cout) for _ in range(branches))

    def forward(self, feats_list, nbr_map):
        outs = [voxel_conv(f, nbr_map, conv.weight, conv.kernel_size, conv.stride) for f, conv in zip(feats_list, self.convs)]
        return torch.stack(outs).sum(0)
