"""An in-memory dataset built when the script starts (before any step); each step reads a slice
of it and a random gather from it. Reading data that existed before the run is no new memory."""

import torch
from torch import nn

torch.manual_seed(0)
DATASET = torch.randn(4096, 16)
LABELS = torch.randint(0, 2, (4096,))
NORMALISED = (DATASET - DATASET.mean(0)) / DATASET.std(0)


def main():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(1000):
        start = (step * 32) % 4064
        x = NORMALISED[start:start + 32]
        noise = DATASET[torch.randint(0, 4096, (32,))] * 0.01
        loss = nn.functional.cross_entropy(model(x + noise), LABELS[start:start + 32])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
