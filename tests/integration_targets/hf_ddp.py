"""transformers.Trainer under torchrun on CPU (2 processes, gloo) with LeakProbeCallback; rank 1
keeps each step's model output when LEAK_ON_RANK1 is set. `torchrun ... hf_ddp.py OUTDIR ON_LEAK`:
prints each rank's verdict, the global step it stopped at and what train() raised, one line per rank."""

import gc
import os
import sys

import torch
from transformers import Trainer

from gradlint.integrations.huggingface import LeakProbeCallback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_models import RegressionDataset, Regressor, arguments  # noqa: E402


class DebugListTrainer(Trainer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.debug = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        if self.args.process_index == 1 and os.environ.get("LEAK_ON_RANK1"):
            self.debug.append(outputs)
        return (loss, outputs) if return_outputs else loss


if __name__ == "__main__":
    torch.set_num_threads(1)
    probe = LeakProbeCallback(steps=40, on_leak=sys.argv[2])
    trainer = DebugListTrainer(model=Regressor(), args=arguments(sys.argv[1], max_steps=80),
                               train_dataset=RegressionDataset(rows=1024), callbacks=[probe])
    raised = ""
    try:
        trainer.train()
    except Exception as e:  # noqa: BLE001 - what train() raised is the result
        raised = type(e).__name__
    # one write (print writes the line and its newline apart): the ranks share one pipe
    sys.stdout.write(f"RESULT rank={trainer.args.process_index} verdict={probe.report.verdict.value} "
                     f"step={trainer.state.global_step} raised={raised or '-'} ranks={len(probe.ranks or [])}\n")
    sys.stdout.flush()
    # What rank 1 kept holds its steps' graphs, and through them DDP's reducer and its process
    # group: let them go before the group is destroyed. Freed at interpreter exit instead, the
    # group's gloo threads were torn down unjoined ("terminate called without an active
    # exception", SIGABRT) in 1 of 4 runs here.
    trainer.debug.clear()
    del trainer
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
