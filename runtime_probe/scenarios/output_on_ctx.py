"""Own output on ctx: `ctx.out = out` closes a cycle output -> grad_fn -> ctx -> output.

Each step's output lives until the cyclic collector runs (delayed-free): measured on torch 2.13,
a lean loop kept outputs alive for a median of 42 steps, and gc.collect() frees them all.
"""

from __future__ import annotations

import torch

from gradlint.cuda_ext import scatter_add

from .common import MessagePassing, Trainer

EXPECTED_VERDICT = "delayed-free"
EXPECTED_CODES = ("GL101",)
HOLDER = "KNNMeanScatter.ctx.out"


class KNNMeanScatter(torch.autograd.Function):
    """Neighbour mean; backward rescales by the per-target counts it kept with the output."""

    @staticmethod
    def forward(ctx, messages, target, dim_size):
        out = scatter_add(messages.detach(), target, dim_size)
        ctx.save_for_backward(target)
        ctx.out = out
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (target,) = ctx.saved_tensors
        return grad_out.index_select(0, target), None, None


def make_step(device: str = "cpu"):
    trainer = Trainer(MessagePassing(KNNMeanScatter.apply), device)

    def step():
        trainer.step()

    return step
