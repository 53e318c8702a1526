"""In-place activations for memory-tight point-cloud backbones."""
import torch
from torch import nn
from torch.autograd.function import InplaceFunction


class ClampInplace(InplaceFunction):
    @staticmethod
    def forward(ctx, input, lo: float, hi: float, inplace=False):
        ctx.lo, ctx.hi = lo, hi
        ctx.inplace = inplace
        mask = (input >= lo) & (input <= hi)
        if inplace:
            ctx.mark_dirty(input)
            output = input.clamp_(lo, hi)
        else:
            output = input.clamp(lo, hi)
        ctx.mask = mask
        return output

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.mask, None, None, None


class LeakyReLUInplace(InplaceFunction):
    @staticmethod
    def forward(ctx, input, negative_slope=0.01, inplace=False):
        ctx.negative_slope = negative_slope
        pos = input >= 0
        factor = torch.where(pos, 1.0, negative_slope).to(input.dtype)
        if inplace:
            ctx.mark_dirty(input)
            output = input.mul_(factor)
        else:
            output = input * factor
        ctx.save_for_backward(pos)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (pos,) = ctx.saved_tensors
        factor = torch.where(pos, 1.0, ctx.negative_slope).to(grad_output.dtype)
        return grad_output * factor, None, None


class ScaleInplace(InplaceFunction):
    @staticmethod
    def forward(ctx, input, scale, inplace=False):
        ctx.scale = scale
        if inplace:
            ctx.mark_dirty(input)
            return input.mul_(scale)
        return input * scale

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.scale


class HardSwishInplace(InplaceFunction):
    @staticmethod
    def forward(ctx, input, inplace=False):
        ctx.save_for_backward(input.detach().clone() if inplace else input)
        gate = (input + 3.0).clamp(0.0, 6.0) / 6.0
        if inplace:
            ctx.mark_dirty(input)
            return input.mul_(gate)
        return input * gate

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad = torch.where(x < -3.0, torch.zeros_like(x), (2.0 * x + 3.0) / 6.0)
        grad = torch.where(x > 3.0, torch.ones_like(x), grad)
        return grad_output * grad, None


class ClampedMLP(nn.Module):
    """MLP that tracks the largest pre-activation it has seen (for int8 calibration)."""

    def __init__(self, dims=(64, 128, 64), clamp=6.0):
        super().__init__()
        self.fc1 = nn.Linear(dims[0], dims[1])
        self.fc2 = nn.Linear(dims[1], dims[2])
        self.clamp = clamp
        self.register_buffer("act_max", torch.zeros(()))
        self.register_buffer("num_batches", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        h = self.fc1(x)
        if self.training:
            with torch.no_grad():
                self.act_max = torch.maximum(self.act_max, h.abs().max())
                self.num_batches += 1
        h = ClampInplace.apply(h, -self.clamp, self.clamp, False)
        h = LeakyReLUInplace.apply(h, 0.1, True)
        return self.fc2(h)
