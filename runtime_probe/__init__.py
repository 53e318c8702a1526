"""The runtime probe (`gradlint probe`): run a training step N times, measure what stays alive,
name what holds it, and cross-check the static findings.

    from gradlint.runtime_probe import probe, assert_no_leak
    report = probe(step, steps=100)        # report.verdict, report.bytes_per_step, report.holders

    from gradlint.runtime_probe import StepProbe, render_text   # steps driven by your own loop

Importing this package does not import torch; the names below load on first use.
"""

from __future__ import annotations

__all__ = ["probe", "ProbeReport", "Verdict", "Holder", "assert_no_leak", "LeakError", "StepProbe", "render_text"]

_WHERE = {
    "probe": "api", "ProbeReport": "probe_report", "StepProbe": "session", "render_text": "session", "Verdict": "verdict", "Holder": "attribute",
    "assert_no_leak": "pytest_helper", "LeakError": "pytest_helper",
}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
