"""A producer thread prefetches batches into a queue of 4; the loop consumes them. Nothing keeps a
batch beyond the queue, so memory stays flat although another thread makes every batch."""

import queue
import threading

import torch
from torch import nn


def produce(out: queue.Queue, stop: threading.Event):
    while not stop.is_set():
        x = torch.randn(64, 32)
        out.put((x, x.sum(1, keepdim=True)))


def main():
    torch.manual_seed(0)
    model = nn.Linear(32, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches, stop = queue.Queue(maxsize=4), threading.Event()
    threading.Thread(target=produce, args=(batches, stop), daemon=True).start()
    for _ in range(1000):
        x, y = batches.get()
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    stop.set()


if __name__ == "__main__":
    main()
