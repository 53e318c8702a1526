"""Quantization-aware training helpers: straight-through estimators, LSQ, gradient reversal."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function


class SignSTE(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x.abs() <= 1).to(g.dtype)


class GradientReversal(Function):
    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.lambd


class BinaryConnect(Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.weight = weight
        ctx.save_for_backward(x)
        wb = weight.sign()
        return x @ wb.t()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        grad_x = g @ ctx.weight.sign()
        grad_w = g.t() @ x
        return grad_x, grad_w


class RoundSTE(Function):
    @staticmethod
    def forward(ctx, x):
        return x.round_()

    @staticmethod
    def backward(ctx, g):
        return g


class LSQQuantizer(Function):
    """Learned step size quantization (Esser et al.)."""

    @staticmethod
    def forward(ctx, x, step, qn, qp):
        ctx.save_for_backward(x, step)
        ctx.other = (qn, qp)
        q = torch.clamp(torch.round(x / step), qn, qp)
        return q * step

    @staticmethod
    def backward(ctx, g):
        x, step = ctx.saved_tensors
        qn, qp = ctx.other
        v = x / step
        lower = (v < qn).float()
        upper = (v > qp).float()
        middle = 1.0 - lower - upper
        grad_step = ((lower * qn + upper * qp + middle * (torch.round(v) - v)) * g).sum().view(1)
        return g * middle, grad_step, None, None


class QuantLinear(nn.Module):
    def __init__(self, fin, fout, bits=4, binary=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(fout, fin) * fin ** -0.5)
        self.bias = nn.Parameter(torch.zeros(fout))
        self.step = nn.Parameter(torch.tensor(1.0))
        self.qn, self.qp = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        self.binary = binary
        self.act_sign = SignSTE()

    def forward(self, x):
        xq = LSQQuantizer.apply(x, self.step, self.qn, self.qp)
        if self.binary:
            out = BinaryConnect.forward(None, xq, self.weight)
            return out + self.bias
        return F.linear(xq, self.weight, self.bias)


class DomainAdversarialNet(nn.Module):
    def __init__(self, feat_dim=256, n_classes=10, n_domains=2):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(784, feat_dim), nn.ReLU(), nn.Linear(feat_dim, feat_dim), nn.ReLU())
        self.classifier = nn.Linear(feat_dim, n_classes)
        self.domain_head = nn.Sequential(nn.Linear(feat_dim, 100), nn.ReLU(), nn.Linear(100, n_domains))

    def forward(self, x, alpha=1.0):
        f = self.features(x)
        rev = GradientReversal.apply(f, alpha)
        return self.classifier(f), self.domain_head(rev)


def train_dann(model, src_loader, tgt_loader, opt, epochs):
    steps = epochs * len(src_loader)
    it = 0
    for epoch in range(epochs):
        for (xs, ys), (xt, _) in zip(src_loader, tgt_loader):
            p = it / steps
            alpha = 2.0 / (1.0 + torch.exp(torch.tensor(-10.0 * p)).item()) - 1
            cls_s, dom_s = model(xs, alpha)
            _, dom_t = model(xt, alpha)
            loss_cls = F.cross_entropy(cls_s, ys)
            dom_y = torch.cat([torch.zeros(len(xs)), torch.ones(len(xt))]).long()
            loss_dom = F.cross_entropy(torch.cat([dom_s, dom_t]), dom_y)
            loss = loss_cls + loss_dom
            opt.zero_grad()
            loss.backward()
            opt.step()
            it += 1
