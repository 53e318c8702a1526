"""Autograd Functions ported from pre-0.4 code, where `.data` was how you reached the tensor."""
import numpy as np
import torch
from torch.autograd import Function


class StandardizedConvWeight(Function):
    """Weight standardization applied to the parameter itself before the conv (in-place)."""

    @staticmethod
    def forward(ctx, x, weight, eps=1e-5):
        mean = weight.mean(dim=(1, 2, 3), keepdim=True)
        std = weight.std(dim=(1, 2, 3), keepdim=True) + eps
        weight.data.sub_(mean).div_(std)
        out = torch.nn.functional.conv2d(x, weight)
        ctx.save_for_backward(x, weight)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x = torch.nn.grad.conv2d_input(x.shape, weight, grad_out)
        grad_w = torch.nn.grad.conv2d_weight(x, weight.shape, grad_out)
        return grad_x, grad_w, None


class ClipGrad(Function):
    """Identity forward, gradient clipped to [-bound, bound] in backward."""

    @staticmethod
    def forward(ctx, x, bound: float):
        ctx.bound = bound
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_out):
        grad_out.data.clamp_(-ctx.bound, ctx.bound)
        return grad_out, None


class BinaryActivation(Function):
    """sign(x) forward, straight-through (hard tanh) backward; keeps a float copy for backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.data)
        out = x.new_empty(x.shape)
        out.data.copy_(x.sign())
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * (x.abs() <= 1).to(grad_out.dtype)


class RunningNorm(Function):
    """Normalize with running statistics updated in place during forward (BatchNorm-like)."""

    @staticmethod
    def forward(ctx, x, running_mean, running_var, momentum: float, eps: float):
        mean = x.mean(0)
        var = x.var(0, unbiased=False)
        running_mean.data.copy_(torch.lerp(running_mean, mean, momentum))
        running_var.data = torch.lerp(running_var, var, momentum)
        inv_std = (var + eps).rsqrt()
        ctx.save_for_backward(x, mean, inv_std)
        return (x - mean) * inv_std

    @staticmethod
    def backward(ctx, grad_out):
        x, mean, inv_std = ctx.saved_tensors
        x_hat = (x - mean) * inv_std
        n = x.size(0)
        grad_x = inv_std / n * (n * grad_out - grad_out.sum(0) - x_hat * (grad_out * x_hat).sum(0))
        return grad_x, None, None, None, None


class ScaleBackward(Function):
    """y = x * scale; the saved scale is overwritten in backward to save memory."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad_out):
        x, scale = ctx.saved_tensors
        grad_x = grad_out * scale
        scale.data.copy_((grad_out * x).sum(0))
        return grad_x, scale


class GraphReadout(Function):
    """Sum node features per graph; `batch` is a PyG-style batch object carrying the assignment."""

    @staticmethod
    def forward(ctx, x, batch):
        assignment = batch.data.batch
        num_graphs = batch.data.num_graphs
        out = x.new_zeros(num_graphs, x.data.size(1))
        out.index_add_(0, assignment, x)
        ctx.save_for_backward(assignment)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (assignment,) = ctx.saved_tensors
        return grad_out[assignment], None


class HostHistogram(Function):
    """Histogram computed on the host; gradient passes straight through."""

    @staticmethod
    def forward(ctx, x, bins: int):
        host = x.detach().cpu().numpy()
        raw = host.data
        counts, _ = np.histogram(np.frombuffer(raw, dtype=host.dtype), bins=bins)
        ctx.num_rows = x.data.shape[0]
        stats = x.data.cpu().numpy().mean()
        return x.clone() if counts.max() > 0 and np.isfinite(stats) else torch.zeros_like(x)

    @staticmethod
    def backward(ctx, grad_out):
        snapshot = grad_out.data.clone()
        return snapshot, None


class ResidualScale(Function):
    """out = x + gate * f with a learnable scalar gate (ReZero), setup_context style."""

    @staticmethod
    def forward(x, f, gate):
        return torch.addcmul(x, gate, f)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, f, gate = inputs
        ctx.save_for_backward(f, gate.data)

    @staticmethod
    def backward(ctx, grad_out):
        f, gate = ctx.saved_tensors
        grad_gate = (grad_out * f).sum().reshape(gate.shape)
        return grad_out, grad_out * gate, grad_gate


@torch.library.custom_op("legacy::gather_rows", mutates_args=())
def gather_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return table.index_select(0, index)


def _gather_rows_setup(ctx, inputs, output):
    table, index = inputs
    ctx.num_rows = table.data.size(0)
    ctx.save_for_backward(index)


def _gather_rows_backward(ctx, grad):
    (index,) = ctx.saved_tensors
    grad_table = grad.new_zeros(ctx.num_rows, grad.size(1))
    grad_table.data.index_add_(0, index, grad)
    return grad_table, None


gather_rows.register_autograd(_gather_rows_backward, setup_context=_gather_rows_setup)


class TensorList:
    """A tiny dataset wrapper: `data` is a list of tensors."""

    def __init__(self, tensors):
        self.data = tensors

    def __getitem__(self, i):
        return self.data[i]


def ema_update(target, source, decay=0.999):
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            t.data.mul_(decay).add_(s.data, alpha=1 - decay)
