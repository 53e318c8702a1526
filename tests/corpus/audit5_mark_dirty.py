"""In-place activation and running-statistics ops done the right way."""
import torch


class InplaceLeakyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, slope):
        ctx.mark_dirty(x)
        x.copy_(torch.where(x > 0, x, x * slope))
        ctx.slope = slope
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad_out):
        (y,) = ctx.saved_tensors
        return torch.where(y > 0, grad_out, grad_out * ctx.slope), None


class ScaledSoftplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        x = x.clone()
        x.mul_(beta)
        out = torch.nn.functional.softplus(x).div_(beta)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (bx,) = ctx.saved_tensors
        return grad_out * torch.sigmoid(bx), None


class BatchStatsNorm(torch.autograd.Function):
    """Normalize with batch statistics and update the running mean (a buffer) in place."""

    @staticmethod
    def forward(ctx, x, running_mean, momentum):
        mean = x.mean(0)
        running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        ctx.n = x.size(0)
        return x - mean

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out - grad_out.mean(0), None, None


class DetachedTarget(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pred, target):
        target.requires_grad_(False)
        buf = torch.empty_like(pred)
        torch.sub(pred, target, out=buf)
        ctx.save_for_backward(buf)
        return buf.pow(2).mean()

    @staticmethod
    def backward(ctx, grad):
        (diff,) = ctx.saved_tensors
        return grad * 2 * diff / diff.numel(), None


def run():
    torch.manual_seed(0)
    a = torch.randn(5, dtype=torch.double, requires_grad=True)
    ok1 = torch.autograd.gradcheck(lambda t: InplaceLeakyReLU.apply(t * 1, 0.1), (a,))
    ok2 = torch.autograd.gradcheck(lambda t: ScaledSoftplus.apply(t, 2.0), (a,))
    rm = torch.zeros(3, dtype=torch.double)
    x = torch.randn(4, 3, dtype=torch.double, requires_grad=True)
    ok3 = torch.autograd.gradcheck(lambda t: BatchStatsNorm.apply(t, rm, 0.1), (x,))
    tgt = torch.randn(5, dtype=torch.double)
    ok4 = torch.autograd.gradcheck(lambda t: DetachedTarget.apply(t, tgt), (a,))
    return ok1, ok2, ok3, ok4
