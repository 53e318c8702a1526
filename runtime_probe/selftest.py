"""`gradlint probe` with no target: probe every bundled scenario and cross-check the static rules.

It passes only when each scenario's measured verdict and static codes are the ones it declares:
the project's check that static analysis and runtime measurement line up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from .api import ProbeReport, probe
from .crosscheck import Row, cross_check, static_findings
from .scenarios import NAMES


@dataclass
class ScenarioResult:
    name: str
    file: str
    expected_verdict: str
    expected_codes: tuple[str, ...]
    report: ProbeReport
    static_codes: tuple[str, ...]
    rows: list[Row] = field(default_factory=list)
    comparison: dict[str, float] = field(default_factory=dict)  # variant -> peak bytes per step

    @property
    def verdict_matches(self) -> bool:
        return self.report.verdict.value == self.expected_verdict

    @property
    def codes_match(self) -> bool:
        return sorted(self.static_codes) == sorted(self.expected_codes)

    @property
    def passed(self) -> bool:
        return self.verdict_matches and self.codes_match


def load_scenario(name: str):
    return importlib.import_module(f"{__package__}.scenarios.{name}")


def run_scenario(name: str, steps: int = 100, *, warmup: int = 10, gc_every: int = 10, device: str = "cpu",
                 on_step: Callable[[int], None] | None = None, track_every: int | None = None) -> ScenarioResult:
    module = load_scenario(name)
    report = probe(module.make_step(device), steps, warmup=warmup, gc_every=gc_every, device=device,
                   name=name, on_step=on_step, track_every=track_every)
    findings = static_findings([module.__file__])
    result = ScenarioResult(name, module.__file__, module.EXPECTED_VERDICT, tuple(module.EXPECTED_CODES), report,
                            tuple(sorted({f.code for f in findings})))
    result.rows = cross_check(report, findings, scenario=name)
    for variant in getattr(module, "COMPARE", ()):
        other = probe(module.make_step(device, variant), max(steps // 4, 12), warmup=min(warmup, 4),
                      gc_every=gc_every, device=device, name=f"{name}[{variant}]", attribute=False,
                      track_every=track_every)
        result.comparison[variant] = other.step_peak_bytes
    return result


def run_all(steps: int = 100, *, warmup: int = 10, gc_every: int = 10, device: str = "cpu",
            names: tuple[str, ...] = NAMES, on_scenario: Callable[[str], Callable[[int], None] | None] | None = None,
            track_every: int | None = None) -> list[ScenarioResult]:
    results = []
    for name in names:
        results.append(run_scenario(name, steps, warmup=warmup, gc_every=gc_every, device=device,
                                    on_step=on_scenario(name) if on_scenario else None, track_every=track_every))
    return results
