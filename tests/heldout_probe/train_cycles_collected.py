"""Each step builds a small tree of debug records with parent links (reference cycles holding the
step's activations); the loop calls gc.collect() at the end of every step, so no cycle outlives
its step."""

import gc

import torch
from torch import nn


class Record:
    def __init__(self, name, value, parent=None):
        self.name, self.value, self.parent, self.children = name, value, parent, []
        if parent is not None:
            parent.children.append(self)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000):
        x = torch.randn(32, 16)
        hidden = model[0](x)
        out = model[2](torch.relu(hidden))
        root = Record("step", out.detach())
        Record("hidden", hidden.detach(), parent=root)
        loss = out.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        del root
        gc.collect()


if __name__ == "__main__":
    main()
