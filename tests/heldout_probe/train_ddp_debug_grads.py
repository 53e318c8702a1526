"""DistributedDataParallel on CPU (gloo), run under torchrun: every rank keeps a copy of the first
layer's gradient after each step "to debug a divergence", in a module-level list."""

import os

import torch
import torch.distributed as dist
from torch import nn

debug_grads = []


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(int(os.environ.get("RANK", "0")))
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(1000):
        x, y = torch.randn(16, 16), torch.randn(16, 1)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        debug_grads.append(model.module[0].weight.grad.clone())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
