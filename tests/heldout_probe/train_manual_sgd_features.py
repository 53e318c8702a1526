"""No optimizer: a two-layer net updated by hand under torch.no_grad(). Each step's hidden
activations are stored in a module-level dict for a later t-SNE plot, graph and all."""

import torch

FEATURES = {}


def train(steps: int = 1000, lr: float = 0.1):
    torch.manual_seed(0)
    w1 = (torch.randn(16, 32) * 0.1).requires_grad_()
    w2 = (torch.randn(32, 1) * 0.1).requires_grad_()
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    for step in range(steps):
        hidden = torch.tanh(x @ w1)
        loss = ((hidden @ w2 - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in (w1, w2):
                p -= lr * p.grad
                p.grad = None
        FEATURES[step] = hidden


if __name__ == "__main__":
    train()
