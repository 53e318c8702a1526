"""A file's text with its comments and string literals left out, for the rules' text markers.

A marker stands for code the rule needs (`def forward`, `.backward(`, `save_for_backward`): a
mention in a docstring's example or a comment shows none of it. torch's own docstrings are full of
`loss.backward()`, so 62 of the 171 files of torch that GL103/GL104's markers and precheck let
through (2026-12-05) held their only `.backward(` or model call in a comment or a string.

One regular expression reads the text left to right as Python's tokenizer does: outside a literal,
a `#` starts a comment and a quote starts a string, and whichever comes first hides the other (a
quote in a comment, a `#` in a string). It needs no tree, so it runs before CPython's parse: 0.07 s
for torch's 9.6 MB that reach GL103/GL104, where a walk of CPython's tree for the literals' spans
took 0.63 s. An f-string is kept whole, its text and the code in its braces alike (3.12 nests
quotes there, which a regular expression cannot pair): what stays can only let a rule in, never
keep one out. Against tokenize's comments and strings on the 4,591 files of torch and the
real-world corpus whose text holds a marker, the rules let in were the same on every file
(2026-12-05); tests/test_code_text.py compares the two on gradlint's own sources and tests.
"""

from __future__ import annotations

import re

_TRIPLE_DOUBLE = r'"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""'
_TRIPLE_SINGLE = r"'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*'''"
_DOUBLE = r'"[^"\\\r\n]*(?:\\.[^"\\\r\n]*)*"'
_SINGLE = r"'[^'\\\r\n]*(?:\\.[^'\\\r\n]*)*'"
# Every alternative starts with `#` or a quote, so the search skips the code between literals in
# C; a string's prefix is read behind its quote (`_F_PREFIX`).
_LITERAL = re.compile(rf"#[^\r\n]*|{_TRIPLE_DOUBLE}|{_TRIPLE_SINGLE}|{_DOUBLE}|{_SINGLE}", re.DOTALL)
_F_PREFIX = re.compile(r"(?:[fF][rR]?|[rR][fF])\Z")


def code_only(source: str) -> str:
    """`source` with each comment and string literal (but f-strings) replaced by one space: no
    marker holds a quote, a `#` or a line break, so none is split or made up by it. The text must
    be Python (CPython parses it); anything else is read as well as it goes."""
    parts: list[str] = []
    done = 0
    for literal in _LITERAL.finditer(source):
        start = literal.start()
        if source[start] != "#" and _F_PREFIX.search(source[max(0, start - 2):start]):
            continue  # an f-string stays
        parts.append(source[done:start])
        done = literal.end()
    if not parts:
        return source
    parts.append(source[done:])
    return " ".join(parts)
