"""StepProbe: the one probe core every entry point drives (a step function, a script, Lightning,
the HF Trainer, pytest, torchrun). A driver only says where each step begins and ends:

    probe = StepProbe(steps=100)
    for batch in loader:
        probe.step_started()
        train_step(batch)
        if probe.step_finished():      # True once `steps` steps were measured: stop stepping
            break
    report = probe.finish()            # verdict, bytes/step, holders; render_text(report) prints it

The contract:
- `step_started()` and `step_finished()` are called in turns, on one thread: the thread that runs
  the step's ops (the tracker is a TorchDispatchMode, which torch keeps per thread; the autograd
  engine carries it into backward on CPU). Tensors other threads make are counted too, for
  threads started after the probe was created (threads.py); the report says when others ran.
- From the first `step_started()` to `finish()` Python's automatic collector is paused: the probe
  collects every `gc_every` steps itself (a cycle is seen piling up, then freed). `finish()` puts
  the collector back as it was.
- A step that raises: call `step_failed(exc)` (optional) and then `finish()`; the report's verdict is
  "error" over the steps measured before it. A KeyboardInterrupt or stop signal in a step:
  `step_interrupted(stop)` then `finish()` gives a partial report. A step begun and never finished
  (the driver stopped) is not counted.
- `finish()` may be called at any time, also before `steps` steps or before any: the report says
  how many were measured and why the verdict is what it is ("too few measured steps"). It is
  idempotent: a second call returns the same report.

Nothing here measures, decides or names on its own: runner.Measurement tracks and collects,
decide.decide judges the series, attribute.name_holders names what holds the growth, and
report.py renders; this module runs them in that order.
"""

from __future__ import annotations

import statistics

from . import signals, threads
from .attribute import name_holders
from .decide import Decision, decide, judged
from .probe_report import ProbeReport
from .runner import Measurement, Run
from .verdict import Verdict


# Below this a step's saved int64 tensors (an embedding's token ids, a small gather) are not worth
# a line; the cross-check still joins any size to GL301.
SAVED_INDEX_NOTE_BYTES = 1 << 20


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if signals.cuda_available() else "cpu"
    if device == "cuda" and not signals.cuda_available():
        raise ValueError("--device cuda: this torch has no usable CUDA device (torch.cuda.is_available() is False)")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: use auto, cpu or cuda")
    return device


class StepProbe:
    """Measure a run whose steps someone else drives: call step_started() before a step's work and step_finished() after."""

    def __init__(self, *, steps: int = 100, warmup: int = 10, gc_every: int = 10, track_every: int | None = None,
                 device: str = "auto", name: str = "", attribute: bool = True, rank: int | None = None) -> None:
        if steps < 1:
            raise ValueError("steps must be at least 1")
        if track_every is not None and track_every < 1:
            raise ValueError("track_every must be at least 1")
        if gc_every < 1:
            raise ValueError("gc_every must be at least 1")
        if warmup < 0:
            raise ValueError("warmup must be at least 0")
        self.device = resolve_device(device)
        self.name = name or "step"
        self.steps = steps
        self.rank = rank
        self.attribute = attribute
        # Threads started from now on are seen; ones already running are counted in the report.
        threads.install()
        self._measurement = Measurement(steps, warmup, gc_every, track_every, name_reclaimed=attribute)
        self._report: ProbeReport | None = None
        self._done = False
        self.notes: list[str] = []  # a driver's own lines for the report (script mode: "ended after ...")

    # -- the driver's calls ---------------------------------------------------------------------
    def step_started(self) -> None:
        if self._report is not None:
            raise RuntimeError("step_started() after finish()")
        if self._done:
            raise RuntimeError(f"step_started() after the {self.steps} steps asked for were measured")
        self._measurement.begin()

    def step_finished(self) -> bool:
        self._done = self._measurement.end()
        return self._done

    def step_failed(self, exc: BaseException) -> None:
        """The step begun last raised `exc`: the report's verdict is "error"."""
        if self._measurement.open:
            self._measurement.fail(exc)

    def step_interrupted(self, stop: BaseException) -> None:
        """A KeyboardInterrupt or stop signal came: the report is a partial one."""
        self._measurement.interrupt(stop)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def steps_done(self) -> int:
        return self._measurement.run.steps_done

    @property
    def step_open(self) -> bool:
        return self._measurement.open

    @property
    def live_bytes(self) -> int:
        return self._measurement.tracker.live_bytes

    def finish(self) -> ProbeReport:
        """The verdict for the steps seen so far (works with fewer steps than asked)."""
        if self._report is not None:
            return self._report
        measurement = self._measurement
        holders = []
        try:
            try:
                run = measurement.close()
                decision = decide(run, self.device)
                if self.attribute:
                    # Named from the same steps the verdict was judged on.
                    holders = name_holders(decision, judged(run), measurement.tracker)
            except KeyboardInterrupt as stop:
                # A stop during the final analysis: the series so far, judged without holders.
                measurement.interrupt(stop)
                run = measurement.run
                decision = decide(run, self.device)
        finally:
            measurement.release()
        self._report = _report(run, decision, holders, self.name, self.device, self.rank,
                               self.notes + _notes(run, decision))
        return self._report


def render_text(report) -> str:
    """The same text `gradlint probe` prints."""
    from .report import report_text

    return report_text(report)


def _report(run: Run, decision: Decision, holders: list, name: str, device: str, rank: int | None,
            notes: list[str]) -> ProbeReport:
    peak = statistics.median(run.step_peak_bytes) if run.step_peak_bytes else 0.0
    step_ms = statistics.median(run.step_seconds) * 1000 if run.step_seconds else 0.0
    tracked_s = [s for s, on in zip(run.step_seconds[run.warmup:], run.step_tracked[run.warmup:]) if on]
    tracked_ms = statistics.median(tracked_s) * 1000 if tracked_s else step_ms
    return ProbeReport(
        name=name, verdict=decision.verdict, reason=decision.reason, bytes_per_step=decision.bytes_per_step,
        graph_nodes_per_step=decision.graph_nodes_per_step, confidence=decision.confidence,
        steps_done=run.steps_done, steps_requested=run.steps_requested, warmup=run.warmup, gc_every=run.gc_every,
        track_every=run.track_every, device=device, steps_to_oom=decision.steps_to_oom, step_peak_bytes=peak,
        median_step_ms=step_ms, tracked_step_ms=tracked_ms, heap_bytes_per_step=decision.heap_bytes_per_step,
        cuda_bytes_per_step=decision.cuda_bytes_per_step, holders=holders, error=run.error,
        measured_verdict=decision.measured_verdict, measured_reason=decision.measured_reason,
        interrupted=run.interrupted, interrupted_by=run.interrupted_by, notes=notes, rank=rank, run=run,
        saved_indices=list(run.saved_indices), dense_from=run.dense_from,
        dense_gc_every=run.dense_gc_every)


def _notes(run: Run, decision: Decision) -> list[str]:
    """What the process did that bears on the verdict, in one line each."""
    notes = []
    if run.steps_done == 0:
        return notes
    if not run.gc_enabled_before:
        notes.append("the cyclic collector was off when the run began (gc.disable()): a reference cycle "
                     "is never freed in this process, so a delayed-free leak here is a permanent one")
    elif run.gc_disabled_at is not None:
        notes.append(f"the process turned the cyclic collector off (gc.disable()) in step {run.gc_disabled_at}: "
                     "a reference cycle is never freed from then on, so a delayed-free leak here is a permanent one")
    if run.gc_frozen_before:
        notes.append(f"{run.gc_frozen_before:,} objects were frozen (gc.freeze()) before the run: a cycle "
                     "through them is never collected")
    if run.gc_frozen_at is not None:
        notes.append(f"the process froze {run.gc_frozen_during:,} objects (gc.freeze()) in step {run.gc_frozen_at}: "
                     "a cycle through them is never collected")
    if run.compiled:
        notes.append("torch.compile'd code ran during the steps: under the probe it ran eagerly, op by op, so the "
                     "compiled path's memory was not measured; what is reported is the eager path's")
    verdicts = {decision.verdict, decision.measured_verdict}
    if Verdict.DELAYED_FREE in verdicts and run.gc_enabled_before and run.gc_disabled_at is None:
        notes.append("delayed-free: the automatic collector frees these cycles, late; with gc.disable() "
                     "or gc.freeze() (some frameworks do) they stay")
    if run.dense_from is not None:
        judged_on = (f"judged on the steps from step {decision.judged_from}" if decision.judged_from else
                     "judged on every step measured (too few left after it)")
        notes.append(f"with 1 step in {run.track_every} tracked a collection saw growth: every step was tracked "
                     f"from step {run.dense_from} on, and the run {judged_on}")
    saved = sum(s.bytes_per_step for s in run.saved_indices)
    if saved >= SAVED_INDEX_NOTE_BYTES:
        from .attribute import display_path
        from .progress import human_bytes

        parts = ", ".join(f"{s.subject} {human_bytes(s.bytes_per_step)}"
                          + (f" at {display_path(s.file)}:{s.line}" if s.file else "") for s in run.saved_indices[:3])
        notes.append(f"this step saves {human_bytes(saved)} of int64 indices until backward ({parts}); "
                     f"int32 would hold {human_bytes(saved / 2)}")
    unseen = threads.unreachable_threads()
    if unseen:
        notes.append(f"{unseen} other thread{'s' if unseen > 1 else ''} started before the probe: tensors "
                     f"{'they make' if unseen > 1 else 'it makes'} are not counted")
    return notes
