"""A file's text with its comments and string literals blanked, for the rules' text markers.

A marker stands for code the rule needs (`def forward`, `.backward(`, `save_for_backward`): a
mention in a docstring's example or a comment shows none of it. torch's own docstrings are full of
`loss.backward()`, so 62 of the 171 files of torch that GL103/GL104's markers and precheck let
through (2026-12-05) held their only `.backward(` or model call in a comment or a string.

The spans come from CPython's tree the engine already has: every string and bytes literal, and
after those every `#` outside them starts a comment. An f-string is left as it is, its text and
the code in its braces alike (CPython 3.11 places the parts inside one unreliably), and a `#` in it
is no comment: what stays can only let a rule through, never keep one out.
"""

from __future__ import annotations

import ast
import bisect

from gradlint.source import split_lines


def code_only(source: str, tree: ast.Module) -> str:
    """`source` with each comment and string literal (but f-strings) replaced by one space: no
    marker holds a quote, a `#` or a line break, so none is split or made up by it."""
    lines = split_lines(source)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:
        line = lines[lineno - 1]
        # CPython's columns count UTF-8 bytes
        return starts[lineno - 1] + (col if line.isascii() else len(line.encode()[:col].decode(errors="ignore")))

    blanked: list[tuple[int, int]] = []  # string literals
    kept: list[tuple[int, int]] = []  # f-strings
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (str, bytes)):
                blanked.append((offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)))
            continue
        if isinstance(node, ast.JoinedStr):
            kept.append((offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)))
            continue
        todo.extend(ast.iter_child_nodes(node))
    literals = sorted(blanked + kept)
    ends = [end for _, end in literals]
    comments: list[tuple[int, int]] = []
    at = source.find("#")
    while at != -1:
        index = bisect.bisect_right(ends, at)  # the first literal ending after `at`
        if index < len(literals) and literals[index][0] <= at:
            at = source.find("#", literals[index][1])  # inside a literal: no comment
            continue
        line = bisect.bisect_right(starts, at) - 1
        end = starts[line] + len(lines[line].rstrip("\r\n"))
        comments.append((at, end))
        at = source.find("#", end)
    if not blanked and not comments:
        return source
    parts: list[str] = []
    done = 0
    for start, end in sorted(blanked + comments):  # never overlapping: the search skips literals
        parts.append(source[done:start])
        done = end
    parts.append(source[done:])
    return " ".join(parts)
