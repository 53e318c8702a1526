"""A Lightning fit under DDP on CPU (2 processes, gloo) with LeakProbe; rank 1 keeps its losses
when LEAK_ON_RANK1 is set (a per-rank debug list). `python lit_ddp.py ON_LEAK`: prints each rank's
verdict, the global step it stopped at and what the fit raised, one line per rank."""

import gc
import os
import sys

import lightning.pytorch as L
import torch

from gradlint.integrations.lightning import LeakProbe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lit_modules import Regressor, regression_loader  # noqa: E402


class DebugListRegressor(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.debug = []

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.global_rank == 1 and os.environ.get("LEAK_ON_RANK1"):
            self.debug.append(loss)
        return loss


if __name__ == "__main__":
    torch.set_num_threads(1)
    probe = LeakProbe(steps=40, on_leak=sys.argv[1])
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, callbacks=[probe],
                        enable_progress_bar=False, enable_model_summary=False, logger=False,
                        enable_checkpointing=False)
    model = DebugListRegressor()
    raised = ""
    try:
        trainer.fit(model, regression_loader(batches=160))
    except Exception as e:  # noqa: BLE001 - what the fit raised is the result
        raised = type(e).__name__
    # one write (print writes the line and its newline apart): the ranks share one pipe
    sys.stdout.write(f"RESULT rank={trainer.global_rank} verdict={probe.report.verdict.value} "
                     f"step={trainer.global_step} raised={raised or '-'} ranks={len(probe.ranks or [])}\n")
    sys.stdout.flush()
    # What rank 1 kept holds its steps' graphs, and through them DDP's reducer and its process
    # group: let them go now rather than at interpreter exit (see hf_ddp.py).
    model.debug.clear()
    del trainer, model
    gc.collect()
