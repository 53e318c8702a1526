"""A module that keeps its activations: `self.activations.append(h)` in forward.

Every step's activation (and its graph's nodes) stays reachable from the module: retained.
"""

from __future__ import annotations

from torch import nn

from .common import CHANNELS, MessagePassing, Trainer

EXPECTED_VERDICT = "retained"
EXPECTED_CODES = ("GL102",)
HOLDER = "PointEncoder.activations"


class PointEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = MessagePassing()
        self.head = nn.Linear(CHANNELS, CHANNELS)
        self.activations = []

    def forward(self, h, source, target):
        h = self.head(self.layer(h, source, target))
        self.activations.append(h)
        return h


def make_step(device: str = "cpu"):
    trainer = Trainer(PointEncoder(), device)

    def step():
        trainer.step()

    return step
