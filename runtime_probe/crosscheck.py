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

from .probe_report import ProbeReport
from .attribute import display_path
from .verdict import Verdict

CONFIRMED = "confirmed"
RUNTIME_ONLY = "runtime-only"
STATIC_ONLY = "static-only"
# A static finding that claims no leak (a wrong gradient, nondeterminism, a slowdown): the probe
# measures memory, so "no growth" beside it would say nothing, or mislead.
NOT_A_LEAK = "not a leak claim"
# GL301 with the bytes the probe saw that Function save until backward.
MEASURED = "measured"

# Rules whose finding says memory outlives the step: the probe can confirm them or see no growth.
LEAK_RULES = frozenset({"GL101", "GL102", "GL103", "GL104", "GL105", "GL107", "GL207"})
# What each other rule is about, as the verdict column and the note say it.
_NOT_A_LEAK = {
    "GL106": ("slowdown", ("torch.cuda.empty_cache() in the loop slows allocation and frees nothing still "
                           "referenced; not memory growth, which is what the probe measures")),
    "GL301": ("memory until backward", ("an int64 index saved for backward costs twice int32's bytes while the graph "
                                        "lives; no saved int64 tensor of it was seen in the sampled steps")),
    "GL302": ("nondeterminism", "float gradients that differ run to run; not memory, which is what the probe measures"),
    "GL303": ("wasted compute", "gradients computed that no input needs: time, not memory growth"),
    "GL304": ("correctness", "in-place changes through .data escape autograd's version checks; not memory"),
}
_OTHER = ("not measured", "a rule the probe has no measurement for")
_CONTRACT = ("correctness", ("an autograd Function contract (wrong or missing gradients, or an error), not memory; "
                             "the probe reports it only when the step raises"))

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
    # Every file asked about is checked, excluded or not: a non-editable install puts the bundled
    # scenarios under site-packages (inside the project's .venv, often), which excludes drop, and
    # the self-test then found no static finding for 8 of 9 scenarios (seen on torch 2.11's venv).
    return list(run_check(CheckRequest(paths=paths, isolated=True, exclude_named=False)).findings)


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
    saved = {s.subject: s for s in getattr(report, "saved_indices", ())}
    for i, f in enumerate(findings):
        if i in used:
            continue
        where = f"{f.code} at {display_path(f.path)}:{f.line}"
        if f.code in LEAK_RULES:
            rows.append(Row(f.subject or "-", 0.0, 0.0, "no growth" if report.verdict is not Verdict.ERROR else "-",
                            where, STATIC_ONLY, _static_only_note(f.code), scenario))
            continue
        index = saved.get(f.subject) if f.code == "GL301" else None
        if index is not None:
            from .progress import human_bytes

            rows.append(Row(f.subject, index.bytes_per_step, 0.0, "saved until backward", where, MEASURED,
                            f"this step saves {human_bytes(index.bytes_per_step)} of int64 until backward; "
                            f"int32 would hold {human_bytes(index.int32_bytes)}", scenario))
            continue
        kind, note = _NOT_A_LEAK.get(f.code) or (_CONTRACT if f.code.startswith("GL2") else _OTHER)
        rows.append(Row(f.subject or "-", None, 0.0, kind, where, NOT_A_LEAK, note, scenario))
    return rows


_CTX_ATTRIBUTE = re.compile(r"^(.+\.ctx)\.[^.]+$")


def _static_only_note(code: str) -> str:
    return {
        "GL101": "measured no growth in this run; where it ran, a ctx attribute still skips the saved-tensor "
                 "version check (a correctness risk, not a leak)",
    }.get(code, "measured no growth in this run")
