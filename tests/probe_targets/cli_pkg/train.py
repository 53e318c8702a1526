"""A clean training step in a package: the module form of a probe target."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    optimizer.zero_grad()
    loss = model(torch.randn(16, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
