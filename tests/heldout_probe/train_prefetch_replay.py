"""A prefetching producer thread feeds batches through a bounded queue; it also keeps every batch
it made in `self.seen`, "for replay later", so every batch stays alive."""

import queue
import threading

import torch
from torch import nn


class Prefetcher(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.batches = queue.Queue(maxsize=4)
        self.seen = []

    def run(self):
        while True:
            batch = torch.randn(32, 64)
            self.seen.append(batch)
            self.batches.put(batch)


def main():
    torch.manual_seed(0)
    model = nn.Linear(64, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    prefetcher = Prefetcher()
    prefetcher.start()
    for _ in range(1000):
        batch = prefetcher.batches.get()
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
