"""Evaluation only: no backward, no optimizer step."""

import torch

model = torch.nn.Linear(4, 1)
with torch.no_grad():
    print(model(torch.randn(2, 4)).shape)
