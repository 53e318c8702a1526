"""A DDP script for torchrun (gloo on CPU). KEEP_ON_RANK1: rank 1 keeps its losses (a per-rank
debug list). KEEP_BY_RANK: every rank keeps a tensor of (rank + 1) rows of 16 floats a step (64 B
on rank 0, 128 B on rank 1): all ranks leak, at different rates."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    debug = []
    seen = []
    for _ in range(1000):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 1 and os.environ.get("KEEP_ON_RANK1"):
            debug.append(loss)
        if os.environ.get("KEEP_BY_RANK"):
            seen.append(torch.randn(rank + 1, 16))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
