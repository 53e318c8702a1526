"""Turn findings into output. Each reporter takes a list of findings and knows nothing else."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Sequence

from gradlint.findings import Applicability, Finding, Severity
from gradlint.fixes import applicable
from gradlint.sarif import sarif


# What a terminal or a log viewer would act on instead of showing: C0 controls (newline, ESC, ...),
# DEL, C1 controls, the bidi embeddings, overrides and isolates (which reorder the text shown, as in
# "Trojan Source"), the Unicode line and paragraph separators, and surrogates (a file name that is
# not UTF-8, as os.fsdecode gives it, or a lone surrogate from a string literal).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SHORT_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for the byte it could not decode
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: str) -> str:
    """`value` with what a terminal would interpret written as backslash escapes (`\\x1b`, `\\n`,
    `\\u202e`; a file name's undecodable byte 0xff as `\\xff`), so a file name or a string from the
    checked source cannot add lines, colour or move the cursor in gradlint's output."""
    return _UNPRINTABLE.sub(_escape, value)


def valid_unicode(value: str) -> str:
    """`value` with its surrogates written as backslash escapes: JSON allows a lone `\\udcff`
    escape in its grammar, but strict parsers (serde_json, for one) reject the whole document."""
    return _SURROGATE.sub(_escape, value)


def valid_strings(value: Any) -> Any:
    """Every string in a JSON-able structure through `valid_unicode`."""
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, dict):
        return {valid_unicode(k) if isinstance(k, str) else k: valid_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [valid_strings(v) for v in value]
    return value


def text(findings: Sequence[Finding], unsafe_fixes: bool = False) -> str:
    """ruff's `[*]` marks a finding `--fix` would fix (with --unsafe-fixes: unsafe ones too)."""
    return "".join(f"{printable(f.path)}:{f.line}:{f.column}: {f.code}{' [*]' if applicable(f, unsafe_fixes) else ''} "
                   f"{printable(f.message)}\n" for f in findings)


def _fix_record(finding: Finding) -> dict | None:
    if finding.fix is None:
        return None
    return {
        "applicability": finding.fix.applicability.value,
        "message": finding.fix.message,
        "edits": [{"content": e.content, "location": {"row": e.line, "column": e.column},
                   "end_location": {"row": e.end_line, "column": e.end_column}} for e in finding.fix.edits],
    }


def as_json(findings: Sequence[Finding]) -> str:
    """ruff's JSON field names, so tooling that reads ruff's output reads ours. json.dumps escapes
    control characters; surrogates (a file name that is not UTF-8) become backslash escapes."""
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
            "fix": _fix_record(f),
            "noqa_row": f.line,
        }
        for f in findings
    ]
    return json.dumps(valid_strings(records), indent=2) + "\n"


_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "notice"}


def _github_escape(value: str, property_value: bool = False) -> str:
    """GitHub's escaping for workflow commands (@actions/core's escapeData, escapeProperty), after
    `printable`: the log viewer also renders ANSI escapes, and GitHub decodes %0A in the data."""
    value = printable(value)
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


FORMATS = {"text": text, "json": as_json, "github": github, "sarif": sarif}


def statistics(findings: Sequence[Finding]) -> str:
    counts = Counter((f.code, f.name) for f in findings)
    width = max((len(str(n)) for n in counts.values()), default=1)
    return "".join(f"{n:>{width}}\t{code}\t{name}\n" for (code, name), n in sorted(counts.items()))


def render(output_format: str, findings: Sequence[Finding], unsafe_fixes: bool = False) -> str:
    if output_format == "text":
        return text(findings, unsafe_fixes)
    return FORMATS[output_format](findings)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def summary(findings: Sequence[Finding], files_checked: int, fixed: int = 0, files_fixed: int = 0,
            unsafe_fixes: bool = False) -> str:
    head = f"Fixed {_plural(fixed, 'finding')} in {_plural(files_fixed, 'file')}.\n" if fixed else ""
    if not findings:
        if files_checked == 0:
            return head + "No Python files to check.\n"
        return head + f"All checks passed! ({files_checked} file{'s' if files_checked != 1 else ''} checked)\n"
    return head + _findings_summary(findings, files_checked) + _fixable_hint(findings, unsafe_fixes)


def _fixable_hint(findings: Sequence[Finding], unsafe_fixes: bool) -> str:
    """ruff's hint, so users learn that --fix exists exactly when it would do something."""
    ready = sum(applicable(f, unsafe_fixes) for f in findings)
    hidden = sum(f.fix is not None and f.fix.applicability is Applicability.UNSAFE for f in findings) \
        if not unsafe_fixes else 0
    if not ready and not hidden:
        return ""
    if not ready:
        return f"No fixes available ({hidden} hidden fix{'es' if hidden != 1 else ''} can be enabled with --unsafe-fixes).\n"
    more = f" ({hidden} more with --unsafe-fixes)" if hidden else ""
    return f"[*] {ready} fixable with --fix{' --unsafe-fixes' if unsafe_fixes else ''}{more}.\n"


def _findings_summary(findings: Sequence[Finding], files_checked: int) -> str:
    by_severity = Counter(f.severity for f in findings)
    parts = ", ".join(f"{by_severity[s]} {s.value}{'s' if by_severity[s] != 1 else ''}"
                      for s in Severity if by_severity[s])
    files = len({f.path for f in findings})
    return (f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''} ({parts}) in "
            f"{files} of {files_checked} file{'s' if files_checked != 1 else ''} checked.\n")
