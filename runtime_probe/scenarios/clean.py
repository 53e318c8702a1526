"""Clean: a custom aggregation that saves its index with save_for_backward.

Nothing outlives the step: the saved index is released by backward and no ctx attribute holds
a tensor. Measured: no growth.
"""

from __future__ import annotations

import torch

from gradlint.cuda_ext import scatter_add

from .common import MessagePassing, Trainer

EXPECTED_VERDICT = "clean"
EXPECTED_CODES: tuple[str, ...] = ()
HOLDER = ""


class KNNScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, messages, target, dim_size):
        ctx.save_for_backward(target)
        return scatter_add(messages.detach(), target, dim_size)

    @staticmethod
    def backward(ctx, grad_out):
        (target,) = ctx.saved_tensors
        return grad_out.index_select(0, target), None, None


def make_step(device: str = "cpu"):
    trainer = Trainer(MessagePassing(KNNScatter.apply), device)

    def step():
        trainer.step()

    return step
