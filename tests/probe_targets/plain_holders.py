"""Training steps that keep tensors on plain Python objects (a logger, a slotted record), not on
an nn.Module: one set-up at import, one step per function."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


class Logger:
    def __init__(self):
        self.history = []
        self.total = 0.0


class StepRecord:
    __slots__ = ("kept",)


class Slotted(StepRecord):
    # `kept` is a slot of the base class: the subclass adds its own.
    __slots__ = ("steps",)

    def __init__(self):
        self.kept = []
        self.steps = 0


log = Logger()
record = Slotted()
metrics = {}


def _loss():
    h = model(torch.randn(32, 16))
    return h.pow(2).mean()


def clean_step():
    optimizer.zero_grad()
    loss = _loss()
    loss.backward()
    optimizer.step()
    log.last = loss.item()


def log_history():
    optimizer.zero_grad()
    loss = _loss()
    loss.backward()
    optimizer.step()
    log.history.append(loss)


def log_total():
    optimizer.zero_grad()
    loss = _loss()
    loss.backward()
    optimizer.step()
    log.total = log.total + loss


def slotted_record():
    optimizer.zero_grad()
    loss = _loss()
    loss.backward()
    optimizer.step()
    record.kept.append(loss)
    record.steps += 1


def _remember(store, key, value):
    store[key] = value


def remember_loss():
    # The loss reaches the global dict through a helper's parameter.
    optimizer.zero_grad()
    loss = _loss()
    loss.backward()
    optimizer.step()
    _remember(metrics, len(metrics), loss)


class Vault:
    def __init__(self):
        self.items = []


vault = Vault()


def hidden_append():
    # The list is reached through getattr: no name the rules can follow.
    optimizer.zero_grad()
    loss = _loss()
    loss.backward()
    optimizer.step()
    getattr(vault, "items").append(loss)
