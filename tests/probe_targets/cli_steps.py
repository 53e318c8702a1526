"""Steps that stop the run or cannot be called with no arguments: how the probe CLI reports them."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
calls = {"exits_at_5": 0, "interrupted_at_15": 0}


def clean_step():
    optimizer.zero_grad()
    model(torch.randn(16, 8)).pow(2).mean().backward()
    optimizer.step()


def exits_at_5():
    # A step that ends the process itself, as a script's early-stopping check might.
    calls["exits_at_5"] += 1
    if calls["exits_at_5"] == 5:
        sys.exit(3)
    clean_step()


def interrupted_at_15():
    # Ctrl-C at the 15th step: after warm-up, before the end.
    calls["interrupted_at_15"] += 1
    if calls["interrupted_at_15"] == 15:
        raise KeyboardInterrupt
    clean_step()


def step_with_batch(batch):
    clean_step()


def step_with_keyword_lr(*, lr):
    clean_step()


def step_with_defaults(batch=None, *args, lr=0.01, **kwargs):
    clean_step()
