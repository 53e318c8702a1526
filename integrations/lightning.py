"""`LeakProbe`: a Lightning Callback that probes the first N training steps of `Trainer.fit`.

    from gradlint.integrations.lightning import LeakProbe

    probe = LeakProbe(steps=50)                  # on_leak="warn" | "stop" | "raise"
    trainer = L.Trainer(callbacks=[probe], max_epochs=3)
    trainer.fit(model, train_loader)
    probe.report.verdict, probe.report.holders   # also printed through Lightning's rank-zero logging

Under DDP each rank probes its own process; rank 0 logs its report, the report of any rank that
leaks, and a summary of every rank's verdict (`probe.ranks`), and a leak on any rank stops or
fails every rank.

Named like Lightning's own callbacks (EarlyStopping, ModelCheckpoint: a noun, no "Callback").

A probed step is one optimizer step: with automatic optimization and `accumulate_grad_batches=k`
it spans the k batches that one optimizer step consumes (the last, shorter window of an epoch ends
where Lightning steps the optimizer); with manual optimization, where `training_step` steps the
optimizers itself, it is one batch. Only the driving is here: measuring, deciding and naming the
holders are gradlint.runtime_probe.session.StepProbe's.
"""

from __future__ import annotations

try:
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.rank_zero import rank_zero_info
except ImportError:
    raise ImportError("gradlint.integrations.lightning needs Lightning: pip install 'torch-gradlint[lightning]'") from None

from gradlint.runtime_probe import LeakError
from gradlint.runtime_probe.distributed import exchange, other_ranks_leak, rank_zero_text
from gradlint.runtime_probe.session import StepProbe, render_text

__all__ = ["LeakError", "LeakProbe"]

ON_LEAK = ("warn", "stop", "raise")


class LeakProbe(pl.Callback):
    """Measure the first `steps` training steps of a fit and say whether memory leaks.

    on_leak: "warn" (report only), "stop" (report, then `trainer.should_stop`), "raise" (fail the fit
    with LeakError, whose message is the report). `stop_when_done=True` ends the fit once the steps
    are measured, whatever the verdict (a quick check before a long run). `device=None` follows the
    module's device. The report is `self.report` (None until the probe finishes).
    """

    def __init__(self, steps: int = 100, *, warmup: int = 10, gc_every: int = 10, track_every: int | None = None,
                 device: str | None = None, on_leak: str = "warn", stop_when_done: bool = False) -> None:
        if on_leak not in ON_LEAK:
            raise ValueError(f"on_leak={on_leak!r}: use one of {', '.join(ON_LEAK)}")
        _check_counts(steps, warmup, gc_every, track_every)
        self.steps, self.warmup, self.gc_every, self.track_every = steps, warmup, gc_every, track_every
        self.device = device
        self.on_leak = on_leak
        self.stop_when_done = stop_when_done
        self.report = None
        # Under DDP, every rank's summary entry in rank order (verdict, bytes/step, first holder,
        # report text); None with one process, or until the probe finishes.
        self.ranks: list[dict] | None = None
        self._probe: StepProbe | None = None
        self._window_start = 0  # trainer.global_step when the open step began
        self._window_batches = 0

    # -- where steps begin and end ---------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._close()  # a fit before this one that ended without a report (a second fit reuses the callback)
        device = self.device or ("cuda" if pl_module.device.type == "cuda" else "cpu")
        self.report = self.ranks = None
        self._probe = StepProbe(steps=self.steps, warmup=self.warmup, gc_every=self.gc_every,
                                track_every=self.track_every, device=device,
                                name=f"{type(pl_module).__name__}.training_step",
                                rank=trainer.global_rank if trainer.world_size > 1 else None)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        probe = self._probe
        if probe is None or probe.done:
            return
        if not probe.step_open:
            self._window_start = trainer.global_step
            self._window_batches = 0
            probe.step_started()
        self._window_batches += 1

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        probe = self._probe
        if probe is None or not probe.step_open:
            return
        # global_step counts optimizer steps; it has not moved while Lightning accumulates. The
        # batch count ends a window whose optimizer step never came (training_step returned None).
        if (pl_module.automatic_optimization and trainer.global_step == self._window_start
                and self._window_batches < trainer.accumulate_grad_batches):
            return
        if probe.step_finished():
            self._conclude(trainer, act=True)

    # -- the fit ended before the steps were measured ------------------------------------------
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._probe is not None:
            # Fewer steps than asked (max_steps, a short loader, another callback stopped the fit):
            # the report says how many were measured; a leak they show still fails the fit.
            self._conclude(trainer, act=True)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        probe = self._probe
        if probe is None:
            return  # finished already (our own LeakError comes through here too)
        if isinstance(exception, KeyboardInterrupt):
            probe.step_interrupted(exception)
        elif probe.step_open:
            probe.step_failed(exception)
        # A report on the steps measured before it; the fit's own exception goes on unchanged.
        self._conclude(trainer, act=False)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._close()

    # -- the report ------------------------------------------------------------------------------
    def _conclude(self, trainer: pl.Trainer, *, act: bool) -> None:
        report = self._probe.finish()
        self._probe = None
        self.report = report
        text = render_text(report)
        # Every rank asks together (a collective under DDP, as EarlyStopping does): one rank's
        # leak stops or fails them all, so none is left waiting in an all-reduce, and rank 0's
        # log shows every rank's verdict, not its own only.
        self.ranks = exchange(report, text) if act and trainer.world_size > 1 else None
        if self.ranks is not None:
            leaked = any(e["leak"] for e in self.ranks)
            text = rank_zero_text(self.ranks)
        else:
            leaked = act and trainer.strategy.reduce_boolean_decision(report.is_leak, all=False)
        if leaked and self.on_leak == "raise" and report.is_leak:
            raise LeakError(report)  # its message is the report: not logged twice
        rank_zero_info(text.rstrip("\n"))
        if leaked and self.on_leak == "raise":
            raise RuntimeError(other_ranks_leak(self.ranks, trainer.global_rank, report))
        if not act:
            return
        if (leaked and self.on_leak == "stop") or self.stop_when_done:
            trainer.should_stop = True

    def _close(self) -> None:
        """Give the collector back and leave the tracker (a probe left open by a fit that ended oddly)."""
        if self._probe is not None:
            self.report = self._probe.finish()
            self._probe = None


def _check_counts(steps: int, warmup: int, gc_every: int, track_every: int | None) -> None:
    """The numbers StepProbe would refuse, refused here where the user wrote them, not at the first batch."""
    if steps < 1 or warmup < 0 or gc_every < 1 or (track_every is not None and track_every < 1):
        raise ValueError(f"LeakProbe(steps={steps}, warmup={warmup}, gc_every={gc_every}, track_every={track_every}): "
                         "steps, gc_every and track_every must be at least 1, warmup at least 0")
