"""`gradlint check --add-noqa`: silence every current finding with a `# noqa: CODE` on its line.

For code that predates gradlint: add the comments once, commit, and from then on gradlint reports
only what is new. Like ruff's `--add-noqa`:
- the comment goes at the end of the finding's first line; when a comment is already there it is
  kept, and an existing `# noqa: X` there gets the new code added (`# noqa: X, GL101`);
- a line whose end lies inside a multi-line string, or that ends in a backslash, cannot take a
  comment: it goes at the end of the line that closes the string or the continuation, where
  suppressions.py reads it as covering every line of that run (ruff's rule too);
- running it twice adds nothing: the findings it silenced are no longer reported.
A file is written with writeback.write_fixed's rules (atomically, only when its text is still the
text checked, keeping its encoding, newlines and permissions; never a file outside the paths
checked, a read-only one, or one with other hard links).
"""

from __future__ import annotations

import ast
import re
import tokenize
import warnings
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from gradlint.findings import Finding
from gradlint.source import split_lines
from gradlint.suppressions import comment_lines, tokens_of

# The same `# noqa[: codes]` that suppressions.py reads.
_NOQA = re.compile(r"#\s*noqa(?P<colon>:\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?", re.IGNORECASE)


@dataclass
class NoqaResult:
    source: str
    added: int = 0  # findings silenced
    skipped: list[tuple[Finding, str]] = field(default_factory=list)  # (finding, why not)


def _comments(tokens) -> dict[int, tuple[int, str]]:
    """Each line's comment as (column, text)."""
    return {token.start[0]: (token.start[1], token.string) for token in tokens if token.type == tokenize.COMMENT}


def _split_break(line: str) -> tuple[str, str]:
    body = line.rstrip("\r\n")
    return body, line[len(body):]


def _with_codes(line: str, comment: tuple[int, str] | None, codes: Sequence[str]) -> str:
    body, newline = _split_break(line)
    if comment is not None:
        column, text = comment
        match = _NOQA.search(text)
        if match is not None and match.group("codes"):
            have = [c.strip().upper() for c in match.group("codes").split(",")]
            merged = have + [c for c in codes if c not in have]
            new_text = text[:match.start()] + "# noqa: " + ", ".join(merged) + text[match.end():]
            return body[:column] + new_text + body[column + len(text):] + newline
        if match is not None:  # a bare `# noqa` silences everything already
            return line
    return body.rstrip(" \t") + "  # noqa: " + ", ".join(codes) + newline


def _same_program(before: str, after: str) -> bool | None:
    """Whether two sources parse to the same tree (None: the first does not parse here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences and the like: not ours to report
        try:
            tree = ast.dump(ast.parse(before))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        try:
            return ast.dump(ast.parse(after)) == tree
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False


def add_noqa(source: str, findings: Iterable[Finding], silenceable: frozenset[str]) -> NoqaResult:
    """`source` with a `# noqa: CODE` for each finding. `silenceable`: the codes a noqa silences
    (the rules'; the engine's GL000/GL001 are reported whatever the comments say)."""
    findings = sorted(findings)
    result = NoqaResult(source)
    wanted = [f for f in findings if f.code in silenceable]
    result.skipped.extend((f, f"{f.code} is not silenced by noqa") for f in findings if f.code not in silenceable)
    if not wanted:
        return result
    tokens = tokens_of(source)
    if tokens is None:
        result.skipped.extend((f, "the file does not tokenize") for f in wanted)
        return result
    comments = _comments(tokens)
    # A line inside a multi-line string or before a backslash cannot end in a comment; the line that
    # ends the run can, and suppressions.py reads a noqa there as covering the whole run.
    moved = comment_lines(tokens)
    lines = split_lines(source)
    by_line: dict[int, list[Finding]] = {}
    for finding in wanted:
        where = moved.get(finding.line, finding.line)
        if not 1 <= where <= len(lines):
            result.skipped.append((finding, "its line is not in the file any more"))
            continue
        by_line.setdefault(where, []).append(finding)

    new_lines = list(lines)
    for number, on_line in by_line.items():
        codes = sorted({f.code for f in on_line})
        new_lines[number - 1] = _with_codes(lines[number - 1], comments.get(number), codes)
    candidate = "".join(new_lines)
    if _same_program(source, candidate) is False:
        # A place the tokenizer let through changes the program (should not happen): add each
        # line's comment only where it alone keeps the program the same.
        new_lines = list(lines)
        for number, on_line in sorted(by_line.items()):
            trial = list(new_lines)
            trial[number - 1] = _with_codes(lines[number - 1], comments.get(number), sorted({f.code for f in on_line}))
            if _same_program(source, "".join(trial)):
                new_lines = trial
            else:
                result.skipped.extend((f, "a comment there would change the code") for f in on_line)
                del by_line[number]
        candidate = "".join(new_lines)
    result.source = candidate
    result.added = sum(len(on_line) for on_line in by_line.values())
    return result
