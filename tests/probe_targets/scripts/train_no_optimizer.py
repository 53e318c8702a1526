"""A hand-written SGD loop, no torch.optim: steps end at each backward(). Keeps its losses."""

import torch

torch.manual_seed(0)
w = torch.randn(16, 1, requires_grad=True)
history = []
for step in range(500):
    x = torch.randn(8, 16)
    loss = (x @ w).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
    history.append(loss)
