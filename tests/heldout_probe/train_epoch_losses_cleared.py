"""Losses (graph attached) are kept for the epoch and averaged at its end, then the list is
cleared: at most one epoch (6 steps) of graphs is alive at any time. Bounded, not a leak."""

import torch
from torch import nn


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(16, 8), torch.randn(16, 1)) for _ in range(6)]
    epoch_losses = []
    for epoch in range(200):
        for x, y in batches:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_losses.append(loss)
        print(f"epoch {epoch}: {torch.stack(epoch_losses).mean().item():.4f}", end="\r")
        epoch_losses.clear()


if __name__ == "__main__":
    main()
