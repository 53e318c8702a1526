"""A clean script with fewer steps than the probe asks for; ends with sys.exit(0)."""

import sys

import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(30):
    loss = model(torch.randn(2, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained")
sys.exit(0)
