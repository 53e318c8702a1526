"""Turn findings into output. Each reporter takes a list of findings and knows nothing else."""

from __future__ import annotations

import json
from collections import Counter
from typing import Sequence

from gradlint.findings import Finding, Severity


def text(findings: Sequence[Finding]) -> str:
    return "".join(f"{f.path}:{f.line}:{f.column}: {f.code} {f.message}\n" for f in findings)


def as_json(findings: Sequence[Finding]) -> str:
    """ruff's JSON field names, so tooling that reads ruff's output reads ours."""
    records = [
        {
            "code": f.code,
            "name": f.name,
            "message": f.message,
            "severity": f.severity.value,
            "filename": f.path,
            "location": {"row": f.line, "column": f.column},
            "end_location": {"row": f.end_line or f.line, "column": f.end_column or f.column},
            "url": f.url,
            "fix": None,
            "noqa_row": f.line,
        }
        for f in findings
    ]
    return json.dumps(records, indent=2) + "\n"


_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "notice"}


def _github_escape(value: str, property_value: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def github(findings: Sequence[Finding]) -> str:
    """GitHub Actions workflow commands: annotations on the pull request's diff."""
    lines = []
    for f in findings:
        props = ",".join([
            f"title={_github_escape(f'gradlint ({f.code})', True)}",
            f"file={_github_escape(f.path, True)}",
            f"line={f.line}", f"col={f.column}",
            f"endLine={f.end_line or f.line}", f"endColumn={f.end_column or f.column}",
        ])
        lines.append(f"::{_GITHUB_LEVEL[f.severity]} {props}::{_github_escape(f'{f.code} {f.message}')}\n")
    return "".join(lines)


FORMATS = {"text": text, "json": as_json, "github": github}


def statistics(findings: Sequence[Finding]) -> str:
    counts = Counter((f.code, f.name) for f in findings)
    width = max((len(str(n)) for n in counts.values()), default=1)
    return "".join(f"{n:>{width}}\t{code}\t{name}\n" for (code, name), n in sorted(counts.items()))


def summary(findings: Sequence[Finding], files_checked: int) -> str:
    if not findings:
        if files_checked == 0:
            return "No Python files to check.\n"
        return f"All checks passed! ({files_checked} file{'s' if files_checked != 1 else ''} checked)\n"
    by_severity = Counter(f.severity for f in findings)
    parts = ", ".join(f"{by_severity[s]} {s.value}{'s' if by_severity[s] != 1 else ''}"
                      for s in Severity if by_severity[s])
    files = len({f.path for f in findings})
    return (f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''} ({parts}) in "
            f"{files} of {files_checked} file{'s' if files_checked != 1 else ''} checked.\n")
