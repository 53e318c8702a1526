"""Uncertainty-weighted multi-task learning (Kendall et al.) with per-task gradient-norm logging."""
import torch
import torch.nn as nn


class UncertaintyWeights(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.log_vars = nn.Parameter(torch.zeros(n))

    def forward(self, losses):
        return sum(torch.exp(-lv) * l + lv for lv, l in zip(self.log_vars, losses))


def train(model, heads, weigher, loader, val_loader, epochs, device):
    params = list(model.parameters()) + list(weigher.parameters()) + [p for h in heads for p in h.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4)
    shared_last = list(model.parameters())[-2]
    for epoch in range(epochs):
        model.train()
        for x, targets in loader:
            x = x.to(device)
            z = model(x)
            losses = [crit(h(z), t.to(device)) for (h, crit), t in zip(heads, targets)]
            norms = []
            for l in losses:
                g, = torch.autograd.grad(l, shared_last, retain_graph=True)
                norms.append(g.norm().item())
            total = weigher(losses)
            opt.zero_grad()
            for i, l in enumerate(losses):
                l.backward(retain_graph=True)
            opt.step()
        model.eval()
        with torch.no_grad():
            val = 0.0
            for x, targets in val_loader:
                z = model(x.to(device))
                val += sum(crit(h(z), t.to(device)).item() for (h, crit), t in zip(heads, targets))
                torch.cuda.empty_cache()
        print(epoch, val / len(val_loader), total.item())
