"""Class prototypes cached by class id: the cache fills while the first batches of each of 24
classes arrive (one class per step), then every entry is only replaced. Bounded: it levels off."""

import argparse

import torch
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--classes", type=int, default=24)
    args = parser.parse_args()
    torch.manual_seed(0)
    encoder = nn.Linear(32, 256)
    optimizer = torch.optim.SGD(encoder.parameters(), lr=0.01)
    prototypes = {}
    for step in range(args.steps):
        label = step % args.classes
        batch = torch.randn(8, 32) + label
        features = encoder(batch)
        loss = features.pow(2).mean()
        if label in prototypes:
            loss = loss + (features.mean(0) - prototypes[label]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prototypes[label] = features.mean(0).detach()


if __name__ == "__main__":
    main()
