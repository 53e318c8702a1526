"""`probe(step, steps=100)`: run a zero-argument training step and say whether memory leaks.

A thin driver over session.StepProbe: it calls the step in a loop between step_started() and
step_finished(); measuring, deciding and naming are the session's.
"""

from __future__ import annotations

from collections.abc import Callable

from .decide import decide
from .probe_report import ProbeReport
from .runner import Run
from .session import StepProbe, _report, resolve_device
from .target import runs_nothing

__all__ = ["probe", "ProbeReport", "resolve_device", "assess"]


def probe(step: Callable[[], object], steps: int = 100, *, warmup: int = 10, gc_every: int = 10,
          device: str = "auto", name: str | None = None, on_step: Callable[[int], None] | None = None,
          attribute: bool = True, track_every: int | None = None,
          on_progress: Callable[[int, StepProbe], None] | None = None) -> ProbeReport:
    """Run `step` `steps` times (the first `warmup` unmeasured) and classify its memory growth.

    `track_every=None` tracks every step unless the tracker would more than double a small step;
    then one step in K (see stride.py). `track_every=1` tracks every step. `on_step(i)` and
    `on_progress(i, session)` are called after each step (the session has `live_bytes`).
    """
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if track_every is not None and track_every < 1:
        raise ValueError("track_every must be at least 1")
    kind = runs_nothing(step)
    if kind is not None:
        raise ValueError(f"{getattr(step, '__qualname__', step)!s} is a {kind}: calling it runs "
                         "none of its body, so there is nothing to measure; probe a plain function")
    session = StepProbe(steps=steps, warmup=warmup, gc_every=gc_every, track_every=track_every, device=device,
                        name=name or getattr(step, "__qualname__", repr(step)), attribute=attribute)
    from . import interrupt

    try:
        while True:
            session.step_started()
            try:
                step()
            except KeyboardInterrupt:
                raise  # Ctrl-C or a stop signal: a partial report (below), no failed step
            except BaseException as exc:  # noqa: BLE001 - the user's step: anything it raises is a finding
                # A BaseException subclass too (a framework's own abort, a sys.exit): the step's
                # failure, reported like any other, not a traceback out of the probe.
                session.step_failed(exc)
                break
            done = session.step_finished()
            if on_step is not None:
                on_step(session.steps_done)
            if on_progress is not None:
                on_progress(session.steps_done, session)
            interrupt.check()
            if done:
                break
    except KeyboardInterrupt as stop:
        session.step_interrupted(stop)
    return session.finish()


def assess(run: Run, name: str, device: str) -> ProbeReport:
    """The report on an already closed run's series, without holders (its tensors are gone)."""
    return _report(run, decide(run, device), [], name, device, None, [])
