"""Older ops from the v1 mesh code base, kept while the models are ported."""
import math

import torch
import torch.nn.functional as nnf
from torch.autograd import Function

from ._ext import FusedOpBase


class _CheckedFunction(Function):
    """Shared input validation for the index ops below."""

    @staticmethod
    def _check_index(index, num_rows):
        if index.numel() and int(index.max()) >= num_rows:
            raise IndexError(f"index {int(index.max())} out of range for {num_rows} rows")


class GatherRows(_CheckedFunction):
    @staticmethod
    def forward(context, table, index):
        _CheckedFunction._check_index(index, table.size(0))
        context.num_rows = table.size(0)
        context.index = index.long()
        return table.index_select(0, index)

    @staticmethod
    def backward(context, grad_out):
        grad = grad_out.new_zeros(context.num_rows, grad_out.size(-1))
        grad.index_add_(0, context.index, grad_out)
        return grad, None


def _save_stats(ctx, x):
    mean = torch.mean(x, dim=0, keepdim=True)
    ctx.mean = mean
    ctx.n = x.size(0)


class CenterRows(_CheckedFunction):
    @staticmethod
    def forward(ctx, x):
        _save_stats(ctx, x)
        return x - ctx.mean

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out - grad_out.mean(0, keepdim=True)


class MaskedGather(_CheckedFunction):
    @staticmethod
    def forward(ctx, x, index, fill_value=0.0):
        def _stash(c):
            c.valid = torch.ge(index, 0)
            c.fill_value = fill_value
            c.num_rows = x.size(0)

        _stash(ctx)
        safe = index.clamp_min(0)
        out = x.index_select(0, safe)
        out[index < 0] = fill_value
        ctx.save_for_backward(safe.int())
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (safe,) = ctx.saved_tensors
        g = grad_out * ctx.valid.unsqueeze(-1)
        grad_x = grad_out.new_zeros(ctx.num_rows, grad_out.size(-1)).index_add_(0, safe, g)
        return grad_x, None


class LinearGELU(_CheckedFunction):
    """gelu(x @ weight.T); the bias was folded into the previous norm layer."""

    @staticmethod
    def forward(ctx, x, weight):
        pre = x @ weight.t()
        ctx.save_for_backward(x, weight, pre)
        return nnf.gelu(pre)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, pre = ctx.saved_tensors
        cdf = 0.5 * (1.0 + torch.erf(pre / math.sqrt(2.0)))
        pdf = torch.exp(-0.5 * pre * pre) / math.sqrt(2.0 * math.pi)
        grad_pre = grad_out * (cdf + pre * pdf)
        grad_x = grad_pre @ weight
        grad_w = grad_pre.t() @ x
        grad_b = grad_pre.sum(0)
        return grad_x, grad_w, grad_b


class LegacyScale(Function):
    # v1 style: no @staticmethod, called as LegacyScale.apply(x, w)
    def forward(self, x, w):
        out = x * w
        self.x = x
        self.w = w
        self.shape = x.shape
        return out

    def backward(self, grad_out):
        return grad_out * self.w, (grad_out * self.x).sum_to_size(self.w.shape)


class FusedGatherScatter(FusedOpBase):
    """Thin wrapper over the compiled kernel; FusedOpBase handles the dispatch."""

    @staticmethod
    def forward(ctx, src, index):
        out = FusedOpBase.run("gather_scatter", src, index)
        ctx.out = out
        ctx.index = index
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return FusedOpBase.run("gather_scatter_backward", grad_out, ctx.index), None
