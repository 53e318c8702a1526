"""Join what the probe measured with what `gradlint check` found, holder by holder.

Both sides name a holder the same way (`KNNScatter.ctx.out`, `PointEncoder.activations`,
`HISTORY`, `losses`, a Function name for GL201/GL301), so the join is on that subject and file.
An attribute of an instance bound to a global is `Logger.history` at runtime and `log.history`
in the source: the holder carries the second as an alias, and the join tries both.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .api import ProbeReport
from .attribute import display_path
from .verdict import Verdict

CONFIRMED = "confirmed"
RUNTIME_ONLY = "runtime-only"
STATIC_ONLY = "static-only"

_FUNCTION_IN_ERROR = re.compile(r"function (\w+?)Backward returned")


@dataclass
class Row:
    holder: str
    bytes_per_step: float | None
    graph_nodes_per_step: float
    verdict: str
    static: str  # "GL101 at knn.py:12", or "-"
    agreement: str
    note: str = ""
    scenario: str = ""



def static_findings(files: list[str]):
    from gradlint.check import CheckRequest, run_check

    paths = sorted({Path(f) for f in files if f and os.path.isfile(f)})
    if not paths:
        return []
    return list(run_check(CheckRequest(paths=paths, isolated=True)).findings)


def files_involved(report: ProbeReport, target_file: str = "") -> list[str]:
    import torch

    torch_dir = os.path.dirname(torch.__file__)
    files = {target_file} if target_file else set()
    for h in report.holders:
        if h.file and not h.file.startswith(torch_dir):
            files.add(h.file)
    if report.error is not None and report.error.where:
        files.add(report.error.where.rsplit(":", 1)[0])
    return sorted(f for f in files if f)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def cross_check(report: ProbeReport, findings, scenario: str = "") -> list[Row]:
    findings = list(findings)
    used: set[int] = set()
    rows: list[Row] = []

    def match(subjects: list[str], file: str = ""):
        # A finding in the holder's own file first, under any of its names; then any file.
        hits = [i for i, f in enumerate(findings)
                if f.subject in subjects and (not file or _same_file(f.path, file))]
        if not hits and file:
            hits = [i for i, f in enumerate(findings) if f.subject in subjects]
        return hits

    def static_text(hits):
        return ", ".join(f"{findings[i].code} at {display_path(findings[i].path)}:{findings[i].line}" for i in hits) or "-"

    for holder in report.holders:
        hits = match([holder.subject, *holder.aliases], holder.file) if holder.subject else []
        if not hits and _CTX_ATTRIBUTE.match(holder.subject or ""):
            # `setattr(ctx, f"cached_{k}", v)`: the rule saw no attribute name, only the call
            hits = match([_CTX_ATTRIBUTE.sub(r"\1.<dynamic>", holder.subject)], holder.file)
        used.update(hits)
        rows.append(Row(holder.subject or "(unnamed: " + ", ".join(holder.created_at) + ")",
                        holder.bytes_per_step, holder.graph_nodes_per_step, holder.verdict or report.verdict.value,
                        static_text(hits), CONFIRMED if hits else RUNTIME_ONLY,
                        "" if hits else "a runtime leak with no static finding: a gap in the rules", scenario))
    if report.error is not None:
        m = _FUNCTION_IN_ERROR.search(report.error.exception)
        subject = m.group(1) if m else ""
        hits = match([subject]) if subject else []
        used.update(hits)
        rows.append(Row(subject or "(step)", None, 0.0, "error", static_text(hits),
                        CONFIRMED if hits else RUNTIME_ONLY, f"step {report.error.step}: {report.error.exception}", scenario))
    leaked = report.verdict.is_leak or (report.measured_verdict is not None and report.measured_verdict.is_leak)
    if leaked and not report.holders:
        rows.append(Row("(unnamed)", report.bytes_per_step, report.graph_nodes_per_step,
                        (report.measured_verdict or report.verdict).value, "-",
                        RUNTIME_ONLY, "no holder could be named", scenario))
    for i, f in enumerate(findings):
        if i in used:
            continue
        rows.append(Row(f.subject or "-", 0.0, 0.0, "no growth" if report.verdict is not Verdict.ERROR else "-",
                        f"{f.code} at {display_path(f.path)}:{f.line}", STATIC_ONLY,
                        _static_only_note(f.code), scenario))
    return rows


_CTX_ATTRIBUTE = re.compile(r"^(.+\.ctx)\.[^.]+$")


def _static_only_note(code: str) -> str:
    return {
        "GL101": "measured no growth in this run; where it ran, a ctx attribute still skips the saved-tensor "
                 "version check (a correctness risk, not a leak)",
        "GL301": "measured no growth: the saved index costs bytes while the graph lives, not per step",
    }.get(code, "measured no growth in this run")
