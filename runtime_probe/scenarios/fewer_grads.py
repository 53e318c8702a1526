"""A backward that returns too few gradients: autograd raises at backward time, not at apply.

Measured on torch 2.13: `RuntimeError: function ...Backward returned an incorrect number of
gradients (expected 3, got 1)`. The probe reports the exception and the step it happened in.
"""

from __future__ import annotations

import torch

from gradlint.cuda_ext import scatter_add

from .common import MessagePassing, Trainer

EXPECTED_VERDICT = "error"
EXPECTED_CODES = ("GL201",)
HOLDER = "KNNScatterShort"


class KNNScatterShort(torch.autograd.Function):
    @staticmethod
    def forward(ctx, messages, target, dim_size):
        ctx.save_for_backward(target)
        return scatter_add(messages.detach(), target, dim_size)

    @staticmethod
    def backward(ctx, grad_out):
        (target,) = ctx.saved_tensors
        return grad_out.index_select(0, target)


def make_step(device: str = "cpu"):
    trainer = Trainer(MessagePassing(KNNScatterShort.apply), device)

    def step():
        trainer.step()

    return step
