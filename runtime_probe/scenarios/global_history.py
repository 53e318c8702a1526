"""A global loss history: `HISTORY.append(loss)` keeps each step's 0-d loss and its graph nodes.

After backward the saved tensors are gone, so the bytes are small (4 B of storage per step) but
the autograd nodes of every step stay reachable: retained.
"""

from __future__ import annotations

from .common import MessagePassing, Trainer

EXPECTED_VERDICT = "retained"
EXPECTED_CODES = ("GL103",)
HOLDER = "HISTORY"

HISTORY = []


def make_step(device: str = "cpu"):
    trainer = Trainer(MessagePassing(), device)

    def step():
        trainer.optimizer.zero_grad()
        loss = trainer.loss()
        loss.backward()
        trainer.optimizer.step()
        HISTORY.append(loss)

    return step
