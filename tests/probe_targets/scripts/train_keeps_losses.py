"""A plain argparse training script that keeps every loss (and its graph) for a plot it never draws."""

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses = []
    for epoch in range(args.epochs):
        for _ in range(10):
            x, y = torch.randn(8, 16), torch.randn(8, 1)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
    print(f"done {len(losses)} steps, last loss {losses[-1].item():.3f}")


if __name__ == "__main__":
    main()
