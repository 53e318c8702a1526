"""Turn findings into output. Each reporter takes a list of findings and knows nothing else."""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from typing import Callable, Mapping, Sequence

from gradlint.escaping import printable, valid_strings, valid_unicode  # noqa: F401 - re-exported
from gradlint.findings import Applicability, Finding, Severity
from gradlint.fixes import applicable
from gradlint.source import split_lines
from gradlint.ruledocs import rule_url
from gradlint.sarif import sarif


def _headline(f: Finding, unsafe_fixes: bool) -> str:
    """ruff's `[*]` marks a finding `--fix` would fix (with --unsafe-fixes: unsafe ones too)."""
    return (f"{printable(f.path)}:{f.line}:{f.column}: {f.code}{' [*]' if applicable(f, unsafe_fixes) else ''} "
            f"{printable(f.message)}\n")


def text(findings: Sequence[Finding], unsafe_fixes: bool = False) -> str:
    """`concise`: one line per finding, `path:line:col: CODE message`."""
    return "".join(_headline(f, unsafe_fixes) for f in findings)


# What `full` shows around a finding's line, as ruff does.
_CONTEXT_LINES = 2
_TAB_STOP = 4

# path -> the file's lines, or None when it cannot be read (a GL001 file, one deleted since).
SourceReader = Callable[[str], "list[str] | None"]


def _display(line: str, start_width: int = 0) -> list[tuple[str, int]]:
    """Each character of a source line as (what is shown, its width in terminal cells): a tab is
    spaces to the next stop, wide (CJK) characters take two cells, combining marks none, and what
    `printable` escapes is shown escaped. The caret line is laid out from the same widths."""
    shown = []
    width = start_width
    for char in line:
        if char == "\t":
            piece = " " * (_TAB_STOP - width % _TAB_STOP)
            cells = len(piece)
        else:
            piece = printable(char)
            if piece != char:
                cells = len(piece)
            elif unicodedata.combining(char):
                cells = 0
            else:
                cells = 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
        shown.append((piece, cells))
        width += cells
    return shown


def _snippet(f: Finding, lines: list[str]) -> str:
    first = max(1, f.line - _CONTEXT_LINES)
    # A span over several lines is underlined on its first; the context after it shows how it goes on.
    last = min(len(lines), f.line + _CONTEXT_LINES)
    gutter = len(str(last))
    blank = " " * gutter + " |"
    out = [blank + "\n"]
    for number in range(first, last + 1):
        line = lines[number - 1].rstrip("\r\n")
        cells = _display(line)
        out.append(f"{number:>{gutter}} | {''.join(piece for piece, _ in cells)}".rstrip() + "\n")
        if number == f.line:
            start = min(f.column - 1, len(cells))
            if f.end_line > f.line:  # a span over lines: underlined to the end of its first
                end = len(cells)
            else:  # no end (GL000, GL001: end_line 0) is one caret
                end = max(start + 1, f.end_column - 1) if f.end_line == f.line else start + 1
            lead = sum(width for _, width in cells[:start])
            span = max(1, sum(width for _, width in cells[start:end]))
            out.append(f"{blank} {' ' * lead}{'^' * span} {f.code}\n")
    out.append(blank + "\n")
    if f.fix is not None:
        out.append(f"{' ' * gutter} = help: {printable(f.fix.message)}\n")
    return "".join(out)


def read_lines(path: str) -> list[str] | None:
    from gradlint.source import read_source

    text = read_source(path, max_bytes=1 << 62)
    return split_lines(text) if isinstance(text, str) else None


def full(findings: Sequence[Finding], unsafe_fixes: bool = False, sources: Mapping[str, str] | None = None,
         reader: SourceReader = read_lines) -> str:
    """ruff's `full`: each finding's line, then the source around it with a caret under the
    finding's columns, and its fix as a `help:` line. `sources` gives the text of what is not a
    file (stdin); every other path is read once, as it is now (after --fix: the fixed text)."""
    cache: dict[str, list[str] | None] = {name: split_lines(text) for name, text in (sources or {}).items()}
    parts = []
    for f in findings:
        if f.path not in cache:
            cache[f.path] = reader(f.path)
        lines = cache[f.path]
        body = _snippet(f, lines) if lines is not None and 1 <= f.line <= len(lines) else ""
        parts.append(_headline(f, unsafe_fixes) + body + "\n")
    return "".join(parts)


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
            "url": rule_url(f.code),
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


FORMATS = {"concise": text, "full": full, "json": as_json, "github": github, "sarif": sarif}
# `text` was the concise format's name before `full` existed; scripts that pass it keep working.
ALIASES = {"text": "concise"}
TEXT_FORMATS = ("concise", "full")  # followed by the summary line


def statistics(findings: Sequence[Finding]) -> str:
    counts = Counter((f.code, f.name) for f in findings)
    width = max((len(str(n)) for n in counts.values()), default=1)
    return "".join(f"{n:>{width}}\t{code}\t{name}\n" for (code, name), n in sorted(counts.items()))


def render(output_format: str, findings: Sequence[Finding], unsafe_fixes: bool = False,
           sources: Mapping[str, str] | None = None) -> str:
    output_format = ALIASES.get(output_format, output_format)
    if output_format == "concise":
        return text(findings, unsafe_fixes)
    if output_format == "full":
        return full(findings, unsafe_fixes, sources)
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
