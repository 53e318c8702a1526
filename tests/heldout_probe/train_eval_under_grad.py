"""A training loop that also scores a validation batch every step, forgetting torch.no_grad():
the pooling Function saves a slice of its own output, and with no backward on the validation
graph that slice keeps the output and the node alive."""

import argparse

import torch
from torch import nn


class TopHalfPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.save_for_backward(out[:, : out.size(1) // 2])
        return out

    @staticmethod
    def backward(ctx, grad):
        (half,) = ctx.saved_tensors
        full = torch.cat([half, half], dim=1)
        return grad * full


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(32, 32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train_x, val_x = torch.randn(16, 32), torch.randn(64, 32)
    scores = []
    for _ in range(args.steps):
        loss = TopHalfPool.apply(model(train_x) * 0.01).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        val = TopHalfPool.apply(model(val_x) * 0.01).mean()
        scores.append(val.item())


if __name__ == "__main__":
    main()
