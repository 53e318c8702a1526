"""An input on ctx: `ctx.target = target` makes no cycle and so no growth.

GL101 is still right: a ctx attribute skips the saved-tensor version check (an in-place change
to it gives a silently wrong gradient) and outlives backward. It is a correctness risk, not a leak.
"""

from __future__ import annotations

import torch

from gradlint.cuda_ext import scatter_add

from .common import MessagePassing, Trainer

EXPECTED_VERDICT = "clean"
EXPECTED_CODES = ("GL101",)
HOLDER = "KNNScatterInput.ctx.target"


class KNNScatterInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, messages: torch.Tensor, target: torch.Tensor, dim_size: int):
        ctx.target = target
        return scatter_add(messages.detach(), target, dim_size)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.index_select(0, ctx.target), None, None


def make_step(device: str = "cpu"):
    trainer = Trainer(MessagePassing(KNNScatterInput.apply), device)

    def step():
        trainer.step()

    return step
