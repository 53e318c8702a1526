"""A classifier trained from the command line; it keeps every batch's logits to build a confusion
matrix after training. The logits carry their graphs, so every step's graph stays alive."""

import argparse

import torch
from torch import nn


def parse_args():
    parser = argparse.ArgumentParser(description="train a small classifier")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    return parser.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    inputs, labels = torch.randn(64, 16), torch.randint(0, 4, (64,))
    history = []
    for epoch in range(args.epochs):
        for start in range(0, len(inputs), args.batch_size):
            logits = model(inputs[start:start + args.batch_size])
            loss = nn.functional.cross_entropy(logits, labels[start:start + args.batch_size])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(logits)
    predictions = torch.cat(history).argmax(1)
    print("last epoch accuracy", (predictions[-64:] == labels).float().mean().item())


if __name__ == "__main__":
    main()
