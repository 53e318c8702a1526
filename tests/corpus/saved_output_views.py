"""Functions that save part of their own output for backward (issue 14's GL107)."""
import torch
import torch.nn.functional as F


class SoftmaxHead(torch.autograd.Function):
    """Softmax over the scores; backward needs only the first `keep` columns of the output."""

    @staticmethod
    def forward(ctx, scores, keep):
        out = torch.softmax(scores, dim=-1)
        ctx.keep = keep
        ctx.save_for_backward(out[:, :keep])
        return out

    @staticmethod
    def backward(ctx, grad):
        head, = ctx.saved_tensors
        g = torch.zeros_like(grad)
        g[:, : ctx.keep] = head * (grad[:, : ctx.keep] - (grad[:, : ctx.keep] * head).sum(-1, keepdim=True))
        return g, None


class GatedLinear(torch.autograd.Function):
    @staticmethod
    def forward(x, weight):
        return torch.sigmoid(x @ weight)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight = inputs
        ctx.save_for_backward(x, weight, output.transpose(0, 1))

    @staticmethod
    def backward(ctx, grad):
        x, weight, out_t = ctx.saved_tensors
        g = grad * out_t.t() * (1 - out_t.t())
        return g @ weight.t(), x.t() @ g


class SoftmaxHeadFixed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, keep):
        out = torch.softmax(scores, dim=-1)
        ctx.keep = keep
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        out, = ctx.saved_tensors
        head = out[:, : ctx.keep]
        g = torch.zeros_like(grad)
        g[:, : ctx.keep] = head * (grad[:, : ctx.keep] - (grad[:, : ctx.keep] * head).sum(-1, keepdim=True))
        return g, None


class RowNorm(torch.autograd.Function):
    """Copies and detached views of the output are fine: no cycle through the graph."""

    @staticmethod
    def forward(ctx, x):
        out = F.normalize(x, dim=1)
        ctx.save_for_backward(x, out[:, :4].clone(), out.detach()[:, 4:])
        return out

    @staticmethod
    def backward(ctx, grad):
        x, first, rest = ctx.saved_tensors
        return grad / x.norm(dim=1, keepdim=True)


class ScanLast(torch.autograd.Function):
    """Cumulative sum; backward reads the last column through a name bound to the slice."""

    @staticmethod
    def forward(ctx, x):
        out = x.cumsum(dim=1)
        last = out[:, -1]
        ctx.save_for_backward(last)
        return out

    @staticmethod
    def backward(ctx, grad):
        last, = ctx.saved_tensors
        return grad.flip(1).cumsum(1).flip(1)


class PairScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        scores = a @ b.t()
        ctx.save_for_backward(a, b, scores.unsqueeze(0), scores.view(-1))
        return scores

    @staticmethod
    def backward(ctx, grad):
        a, b, _, _ = ctx.saved_tensors
        return grad @ b, grad.t() @ a


class WindowMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, width):
        out = x.unfold(1, width, 1).amax(-1)
        ctx.width = width
        ctx.save_for_backward(x, out.narrow(1, 0, 1))
        return out

    @staticmethod
    def backward(ctx, grad):
        x, first = ctx.saved_tensors
        return torch.zeros_like(x), None


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, n):
        out = x.sum(0, keepdim=True)
        ctx.save_for_backward(out.expand(n, -1))
        return out

    @staticmethod
    def backward(ctx, grad):
        expanded, = ctx.saved_tensors
        return grad.expand_as(expanded), None


class ReshapeIsNotSurelyAView(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.t() * 2
        ctx.save_for_backward(out.reshape(-1), out.contiguous())
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
