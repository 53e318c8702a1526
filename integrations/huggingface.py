"""`LeakProbeCallback`: a transformers TrainerCallback that probes the first N steps of `Trainer.train()`.

    from gradlint.integrations.huggingface import LeakProbeCallback

    probe = LeakProbeCallback(steps=50)           # on_leak="warn" | "stop" | "raise"
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[probe])
    trainer.train()
    probe.report.verdict, probe.report.holders    # the report is also printed by the main process

Under DDP (torchrun) each rank probes its own process; the main process prints its report, the
report of any rank that leaks, and a summary of every rank's verdict (`probe.ranks`), and a leak
on any rank stops or fails every rank.

Named like transformers' own callbacks (EarlyStoppingCallback, PrinterCallback).

A probed step is one optimizer step, as the Trainer counts them (`state.global_step`): from
`on_step_begin` to `on_step_end`, which spans every micro-batch of `gradient_accumulation_steps`.
The Trainer fetches a step's batches before `on_step_begin`, so the data loader's work is outside
the measured step. Only the driving is here: measuring, deciding and naming the holders are
gradlint.runtime_probe.session.StepProbe's.
"""

from __future__ import annotations

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("gradlint.integrations.huggingface needs transformers: pip install 'torch-gradlint[hf]'") from None

from gradlint.runtime_probe import LeakError
from gradlint.runtime_probe.distributed import exchange, other_ranks_leak, rank_zero_text
from gradlint.runtime_probe.session import StepProbe, render_text

__all__ = ["LeakError", "LeakProbeCallback"]

ON_LEAK = ("warn", "stop", "raise")


class LeakProbeCallback(TrainerCallback):
    """Measure the first `steps` optimizer steps of a `Trainer.train()` and say whether memory leaks.

    on_leak: "warn" (report only), "stop" (report, then `control.should_training_stop`), "raise"
    (fail the training with LeakError, whose message is the report). `stop_when_done=True` ends the
    training once the steps are measured, whatever the verdict. `device=None` follows
    `TrainingArguments.device`. The report is `self.report` (None until the probe finishes).

    transformers has no callback event for a step that raises: if `train()` raises inside a probed
    step and the process goes on (a notebook, a retry), call `finish()`; the next `train()` does it too.
    """

    def __init__(self, steps: int = 100, *, warmup: int = 10, gc_every: int = 10, track_every: int | None = None,
                 device: str | None = None, on_leak: str = "warn", stop_when_done: bool = False) -> None:
        if on_leak not in ON_LEAK:
            raise ValueError(f"on_leak={on_leak!r}: use one of {', '.join(ON_LEAK)}")
        if steps < 1 or warmup < 0 or gc_every < 1 or (track_every is not None and track_every < 1):
            # What StepProbe would refuse, refused here where the user wrote it, not at the first step.
            raise ValueError(f"LeakProbeCallback(steps={steps}, warmup={warmup}, gc_every={gc_every}, "
                             f"track_every={track_every}): steps, gc_every and track_every must be at least 1, "
                             "warmup at least 0")
        self.steps, self.warmup, self.gc_every, self.track_every = steps, warmup, gc_every, track_every
        self.device = device
        self.on_leak = on_leak
        self.stop_when_done = stop_when_done
        self.report = None
        # Under DDP, every rank's summary entry in rank order (verdict, bytes/step, first holder,
        # report text); None with one process, or until the probe finishes.
        self.ranks: list[dict] | None = None
        self._probe: StepProbe | None = None
        self._main_process = True
        self._rank, self._world = 0, 1

    # -- where steps begin and end ---------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.finish()  # an earlier train() that raised inside a probed step (auto_find_batch_size retries)
        device = self.device or ("cuda" if args.device.type == "cuda" else "cpu")
        self._main_process = state.is_world_process_zero
        self._rank, self._world = args.process_index, args.world_size
        self.report = self.ranks = None
        self._probe = StepProbe(steps=self.steps, warmup=self.warmup, gc_every=self.gc_every,
                                track_every=self.track_every, device=device,
                                name=f"{type(model).__name__} (Trainer.train)" if model is not None else "Trainer.train",
                                rank=args.process_index if args.world_size > 1 else None)

    def on_step_begin(self, args, state, control, **kwargs):
        probe = self._probe
        if probe is not None and not probe.done and not probe.step_open:
            probe.step_started()

    def on_step_end(self, args, state, control, **kwargs):
        probe = self._probe
        if probe is None or not probe.step_open:
            return None
        if probe.step_finished():
            self._conclude(control)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._probe is not None:
            # Fewer steps than asked (max_steps, a short dataset, another callback stopped it): the
            # report says how many were measured; a leak they show still fails the training.
            self._conclude(control)
        return control

    # -- the report ------------------------------------------------------------------------------
    def finish(self):
        """End the probe now (gives the collector back, leaves the tracker) and return its report."""
        if self._probe is not None:
            self.report = self._probe.finish()
            self._probe = None
        return self.report

    def _conclude(self, control) -> None:
        report = self.finish()
        text = render_text(report)
        # Every rank finishes at the same optimizer step: one collective gives rank 0 every rank's
        # verdict, and a leak on any rank stops or fails them all (one rank stopping alone would
        # leave the others waiting in its all-reduce).
        self.ranks = exchange(report, text) if self._world > 1 else None
        leaked = any(e["leak"] for e in self.ranks) if self.ranks is not None else report.is_leak
        if self.ranks is not None:
            text = rank_zero_text(self.ranks)
        if leaked and self.on_leak == "raise" and report.is_leak:
            raise LeakError(report)  # its message is the report: not printed twice
        if self._main_process:
            print(text, end="", flush=True)
        if leaked and self.on_leak == "raise":
            raise RuntimeError(other_ranks_leak(self.ranks, self._rank, report))
        if (leaked and self.on_leak == "stop") or self.stop_when_done:
            control.should_training_stop = True
