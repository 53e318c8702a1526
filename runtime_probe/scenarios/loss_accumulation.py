"""Loss accumulation without `.item()`: `running_loss += loss` chains every step's graph.

The sum is one 0-d tensor, so the bytes stay flat; the autograd chain behind it grows by a few
nodes per step (measured on torch 2.13: 804 nodes after 100 steps of a 2-layer MLP): retained.
"""

from __future__ import annotations

from .common import MessagePassing, Trainer

EXPECTED_VERDICT = "retained"
EXPECTED_CODES = ("GL104",)
HOLDER = "running_loss"

running_loss = 0.0


def make_step(device: str = "cpu"):
    trainer = Trainer(MessagePassing(), device)

    def step():
        global running_loss
        trainer.optimizer.zero_grad()
        loss = trainer.loss()
        loss.backward()
        trainer.optimizer.step()
        running_loss += loss

    return step
