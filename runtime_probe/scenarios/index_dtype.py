"""int64 vs int32 saved index: not a leak, a cost while the graph lives.

The Function finds each point's neighbours itself and saves the index for backward. `topk`
returns int64: 8 bytes per edge held until backward, where int32 holds 4 (measured on torch
2.13: 8,000,000 B vs 4,000,000 B for 1e6 indices). The probe compares the two variants' peak
bytes per step; neither grows.
"""

from __future__ import annotations

import torch

from gradlint.cuda_ext import scatter_add

from .common import NEIGHBOURS, Trainer

EXPECTED_VERDICT = "clean"
EXPECTED_CODES = ("GL301",)
HOLDER = "KNNPool64"
COMPARE = ("int64", "int32")


class KNNPool64(torch.autograd.Function):
    """Sum of each point's k nearest neighbours' features, neighbours found in forward."""

    @staticmethod
    def forward(ctx, h, points):
        nearest = torch.cdist(points, points).topk(NEIGHBOURS, largest=False).indices.reshape(-1)
        target = torch.arange(points.shape[0], device=h.device).repeat_interleave(NEIGHBOURS)
        ctx.save_for_backward(nearest, target)
        return scatter_add(h.detach().index_select(0, nearest), target, h.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        nearest, target = ctx.saved_tensors
        grad_h = scatter_add(grad_out.index_select(0, target), nearest, grad_out.shape[0], deterministic=True)
        return grad_h, None


class KNNPool32(torch.autograd.Function):
    """The same with the index kept as int32 (scatter_add and index_select take it natively)."""

    @staticmethod
    def forward(ctx, h, points):
        nearest = torch.cdist(points, points).topk(NEIGHBOURS, largest=False).indices.reshape(-1).to(torch.int32)
        target = torch.arange(points.shape[0], device=h.device, dtype=torch.int32).repeat_interleave(NEIGHBOURS)
        ctx.save_for_backward(nearest, target)
        return scatter_add(h.detach().index_select(0, nearest), target, h.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        nearest, target = ctx.saved_tensors
        grad_h = scatter_add(grad_out.index_select(0, target), nearest, grad_out.shape[0], deterministic=True)
        return grad_h, None


class PoolNet(torch.nn.Module):
    def __init__(self, pool) -> None:
        super().__init__()
        self.pool = pool
        self.embed = torch.nn.Linear(16, 16)
        self.mix = torch.nn.Linear(16, 16)

    def forward(self, h, points):
        # The pool's input comes from a layer: it requires grad, so the Function is in the graph
        # and its index is saved until backward (fed the batch itself, no node is made and
        # nothing is saved: the probe then saw no saved int64 tensor at all).
        return torch.relu(self.mix(self.pool.apply(self.embed(h), points)))


def make_step(device: str = "cpu", variant: str = "int64"):
    trainer = Trainer(PoolNet(KNNPool64 if variant == "int64" else KNNPool32), device)

    def step():
        trainer.optimizer.zero_grad()
        loss = trainer.model(trainer.batch(), trainer.points).pow(2).mean()
        loss.backward()
        trainer.optimizer.step()

    return step
