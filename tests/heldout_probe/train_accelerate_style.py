"""An accelerate-style loop written by hand (no accelerate installed): a small Accelerator with
prepare/backward/accumulate, gradient accumulation over 2 micro-batches, and a metric tracker
whose running total adds the loss tensor itself instead of `loss.item()`."""

import argparse
from contextlib import contextmanager

import torch
from torch import nn


class Accelerator:
    def __init__(self, gradient_accumulation_steps: int = 1):
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.micro_step = 0

    def prepare(self, *objects):
        return objects

    def backward(self, loss):
        (loss / self.gradient_accumulation_steps).backward()

    @property
    def sync_gradients(self) -> bool:
        return self.micro_step % self.gradient_accumulation_steps == 0

    @contextmanager
    def accumulate(self, model):
        self.micro_step += 1
        yield


class MetricTracker:
    def __init__(self):
        self.total = 0.0
        self.count = 0

    def update(self, loss):
        self.total = self.total + loss
        self.count += 1

    def mean(self) -> float:
        return float(self.total) / max(1, self.count)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    torch.manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [(torch.randn(16, 32), torch.randn(16, 1)) for _ in range(8)]
    model, optimizer, batches = accelerator.prepare(model, optimizer, batches)
    metrics = MetricTracker()
    for step in range(args.steps):
        x, y = batches[step % len(batches)]
        with accelerator.accumulate(model):
            loss = nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                optimizer.step()
                optimizer.zero_grad()
        metrics.update(loss)
    print("mean loss", metrics.mean())


if __name__ == "__main__":
    main()
