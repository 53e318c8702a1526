"""Quantisation-aware training pieces: weight standardisation, LSQ-style fake quant, gradient clipping."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function


class StandardizedWeight(Function):
    """Weight Standardization folded into the conv weight before quantising."""

    @staticmethod
    def forward(ctx, weight, eps):
        w = weight.data
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        std = w.std(dim=(1, 2, 3), keepdim=True) + eps
        w.sub_(mean).div_(std)
        ctx.save_for_backward(std)
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, g):
        (std,) = ctx.saved_tensors
        return g / std, None


class FakeQuantSTE(Function):
    @staticmethod
    def forward(ctx, x, scale, qmin, qmax):
        ctx.save_for_backward(x, scale)
        ctx.qrange = (qmin, qmax)
        ctx.in_shape = x.data.shape
        q = torch.clamp(torch.round(x / scale), qmin, qmax)
        return q * scale

    @staticmethod
    def backward(ctx, g):
        x, scale = ctx.saved_tensors
        qmin, qmax = ctx.qrange
        v = x / scale
        inside = (v >= qmin) & (v <= qmax)
        g.data.mul_(inside.to(g.dtype))
        q = torch.clamp(torch.round(v), qmin, qmax)
        g_scale = ((q - v * inside) * g).sum().reshape(scale.shape)
        return g, g_scale, None, None


class ClipGradient(Function):
    @staticmethod
    def forward(ctx, x, bound):
        ctx.bound = bound
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g_ref = g.data.clone()
        return g_ref.clamp_(-ctx.bound, ctx.bound), None


class QConv2d(nn.Conv2d):
    def __init__(self, *args, bits=4, **kwargs):
        super().__init__(*args, **kwargs)
        self.qmax = 2 ** (bits - 1) - 1
        self.w_scale = nn.Parameter(torch.tensor(0.05))

    def forward(self, x):
        w = StandardizedWeight.apply(self.weight, 1e-5)
        w = FakeQuantSTE.apply(w, self.w_scale, -self.qmax - 1, self.qmax)
        return F.conv2d(ClipGradient.apply(x, 1.0), w, self.bias, self.stride, self.padding)


@torch.no_grad()
def sgd_step(model, lr):
    for p in model.parameters():
        if p.grad is not None:
            p.data.add_(p.grad.data, alpha=-lr)
