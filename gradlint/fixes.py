"""Fixes as text: turn a rule's node-level plan into character edits, and apply the edits of many
findings to one source without letting two fixes touch the same text."""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import Iterable, Mapping, Sequence

import libcst as cst
from libcst.metadata import CodeRange

from gradlint.findings import Applicability, Edit, Finding, Fix
from gradlint.rule import DeleteLines, FixPlan, InsertLineAbove, Replace

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ONLY_COMMENT = re.compile(r"[ \t\f]*(#.*)?")


class SourceLines:
    """Offsets of a source's lines, for going between libcst's (line, column) and str indices.
    libcst counts columns in code points, as str indexing does."""

    def __init__(self, source: str):
        self.source = source
        self.starts = [0] + [m.end() for m in _LINE_BREAK.finditer(source)]
        first = _LINE_BREAK.search(source)
        self.newline = first.group() if first else "\n"

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column

    def position(self, offset: int) -> tuple[int, int]:
        """(1-based line, 1-based column) of an offset."""
        line = bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1

    def line_end(self, line: int) -> int:
        """Offset just past the line's break (the end of the source for the last line)."""
        return self.starts[line] if line < len(self.starts) else len(self.source)

    def edit(self, start: int, end: int, content: str) -> Edit:
        line, column = self.position(start)
        end_line, end_column = self.position(end)
        return Edit(start, end, content, line, column, end_line, end_column)


def plan_to_fix(plan: FixPlan, positions: Mapping[cst.CSTNode, CodeRange], lines: SourceLines) -> Fix | None:
    """The plan as edits, or None when a change cannot be placed exactly (a node with no position,
    a line shared with other code): a fix applied half-way would break the user's file."""
    edits = []
    for change in plan.changes:
        where = positions.get(change.node)
        if where is None:
            return None
        start = lines.offset(where.start.line, where.start.column)
        end = lines.offset(where.end.line, where.end.column)
        if isinstance(change, Replace):
            edits.append(lines.edit(start, end, change.text.replace("\n", lines.newline)))
        elif isinstance(change, InsertLineAbove):
            line_start = lines.starts[where.start.line - 1]
            indent = lines.source[line_start:start]
            if indent.strip():
                return None
            text = "".join(indent + part + lines.newline for part in change.text.split("\n"))
            edits.append(lines.edit(line_start, line_start, text))
        elif isinstance(change, DeleteLines):
            line_start = lines.starts[where.start.line - 1]
            after = lines.line_end(where.end.line)
            rest = lines.source[end:after].rstrip("\r\n")
            if lines.source[line_start:start].strip() or not _ONLY_COMMENT.fullmatch(rest):
                return None
            edits.append(lines.edit(line_start, after, ""))
        else:  # pragma: no cover - a new change type without a translation
            raise TypeError(f"unknown change {change!r}")
    return Fix(plan.message, plan.applicability, tuple(sorted(edits)))


def _overlaps(a: Edit, b: Edit) -> bool:
    if a.start == b.start:  # two insertions at one point (or an insertion at a replacement's start)
        return True
    return a.start < b.end and b.start < a.end


def applicable(finding: Finding, unsafe: bool) -> bool:
    return finding.fix is not None and (unsafe or finding.fix.applicability is Applicability.SAFE)


def apply_fixes(source: str, findings: Iterable[Finding], unsafe: bool) -> tuple[str, int]:
    """Apply every applicable fix that touches no text another chosen fix touches, in source order;
    the rest wait for the next round, on the re-linted result. Returns the new source and how many
    findings were fixed (two findings with the same fix both count: both are gone)."""
    chosen: list[Edit] = []
    chosen_fixes: set[tuple[Edit, ...]] = set()
    fixed = 0
    for finding in sorted(findings):
        if not applicable(finding, unsafe):
            continue
        edits = finding.fix.edits
        if edits in chosen_fixes:
            fixed += 1
            continue
        if any(_overlaps(edit, other) for edit in edits for other in chosen):
            continue
        chosen.extend(edits)
        chosen_fixes.add(edits)
        fixed += 1
    return splice(source, chosen), fixed


def splice(source: str, edits: Sequence[Edit]) -> str:
    parts = []
    position = 0
    for edit in sorted(edits):
        parts.append(source[position:edit.start])
        parts.append(edit.content)
        position = edit.end
    parts.append(source[position:])
    return "".join(parts)
