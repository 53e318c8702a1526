"""A leak check for the user's own test suite, in the spirit of PyTorch's CudaMemoryLeakCheck.

    from gradlint.runtime_probe import assert_no_leak

    def test_training_step_does_not_leak():
        assert_no_leak(make_step(), steps=50)
"""

from __future__ import annotations

from collections.abc import Callable

from .api import ProbeReport, probe


class LeakError(AssertionError):
    def __init__(self, report: ProbeReport) -> None:
        from .report import report_text

        super().__init__(report_text(report))
        self.report = report


def assert_no_leak(step: Callable[[], object], steps: int = 50, *, warmup: int = 10, gc_every: int = 10,
                   allow_delayed_free: bool = False, device: str = "auto",
                   track_every: int | None = None) -> ProbeReport:
    """Fail (LeakError, an AssertionError) when the step leaks or raises; return the report."""
    report = probe(step, steps, warmup=warmup, gc_every=gc_every, device=device, track_every=track_every)
    if report.error is not None or report.verdict.value == "retained" or (
            report.verdict.value == "delayed-free" and not allow_delayed_free):
        raise LeakError(report)
    return report
