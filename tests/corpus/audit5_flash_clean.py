"""Flash-attention style forward that saves the log-sum-exp, with optional dropout."""
import math

import torch


class FlashAttnLSE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, dropout_p, causal):
        scale = 1.0 / math.sqrt(q.size(-1))
        s = (q @ k.transpose(-1, -2)) * scale
        t = q.size(-2)
        if causal:
            pos = torch.arange(t, dtype=torch.int32, device=q.device)
            s = s.masked_fill(pos.view(-1, 1) < pos.view(1, -1), float("-inf"))
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        p = torch.exp(s - lse)
        if dropout_p > 0:
            keep = (torch.rand_like(p) >= dropout_p).to(p.dtype) / (1 - dropout_p)
            out = (p * keep) @ v
            ctx.save_for_backward(q, k, v, out, lse, keep)
        else:
            out = p @ v
            ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.causal, ctx.dropout_p = scale, causal, dropout_p
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, *rest = ctx.saved_tensors
        keep = rest[0] if rest else None
        s = (q @ k.transpose(-1, -2)) * ctx.scale
        if ctx.causal:
            t = q.size(-2)
            pos = torch.arange(t, device=q.device)
            s = s.masked_fill(pos.view(-1, 1) < pos.view(1, -1), float("-inf"))
        p = torch.exp(s - lse)
        pd = p * keep if keep is not None else p
        dv = pd.transpose(-1, -2) @ dout if ctx.needs_input_grad[2] else None
        dp = dout @ v.transpose(-1, -2)
        if keep is not None:
            dp = dp * keep
        ds = p * (dp - (dp * p).sum(-1, keepdim=True)) * ctx.scale
        dq = ds @ k if ctx.needs_input_grad[0] else None
        dk = ds.transpose(-1, -2) @ q if ctx.needs_input_grad[1] else None
        return dq, dk, dv, None, None


def run():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 3, dtype=torch.double, requires_grad=True) for _ in range(3))
    ok1 = torch.autograd.gradcheck(lambda a, b, c: FlashAttnLSE.apply(a, b, c, 0.0, True), (q, k, v))
    ok2 = torch.autograd.gradcheck(lambda a, b, c: FlashAttnLSE.apply(a, b, c, 0.0, False), (q, k, v))
    return ok1, ok2
