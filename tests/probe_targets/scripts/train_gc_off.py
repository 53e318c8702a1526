"""A training script that turns Python's cyclic collector off after its imports, as some training
frameworks do to avoid collection pauses, and whose step leaves a reference cycle holding the
step's activations (a node object and its back-reference): with the collector off it is never freed."""

import argparse
import gc

import torch


class Record:
    def __init__(self, activations: torch.Tensor) -> None:
        self.activations = activations
        self.me = self  # the cycle


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() the model instead of gc.disable()")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.freeze:
        gc.freeze()
    else:
        gc.disable()
    for _ in range(1000):
        x, y = torch.randn(8, 16), torch.randn(8, 1)
        hidden = model[0](x)
        Record(hidden.detach().clone())
        loss = torch.nn.functional.mse_loss(model[2](model[1](hidden)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
