"""A prefetching producer thread that keeps every batch it made (for "replay" it never does)."""

import queue
import threading

import torch


class Prefetcher:
    def __init__(self) -> None:
        self.ready: queue.Queue = queue.Queue(maxsize=2)
        self.made = []  # every batch stays here: the leak, made on the producer thread
        threading.Thread(target=self._produce, daemon=True).start()

    def _produce(self) -> None:
        while True:
            batch = torch.randn(64, 32)
            self.made.append(batch)
            self.ready.put(batch)

    def next(self):
        return self.ready.get()


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = Prefetcher()
    for _ in range(1000):
        x = loader.next()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
