"""Raises on its 25th batch (a shape bug in the data)."""

import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(100):
    x = torch.randn(2, 4 if i < 24 else 5)
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
