"""`# noqa` and `# gradlint:` comments: which findings the author has silenced.

A comment cannot go inside a multi-line string or after a backslash continuation, so, as in ruff,
a noqa at the end of such a run of lines covers every line of it: the one after the closing
quotes covers the string's lines, the one after `\\`-joined lines covers all of them."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_CODES = r"[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*"
_NOQA = re.compile(rf"#\s*noqa(?::\s*(?P<codes>{_CODES}))?", re.IGNORECASE)
_IGNORE = re.compile(rf"#\s*gradlint:\s*ignore\[(?P<codes>{_CODES})\]", re.IGNORECASE)
_FILE = re.compile(rf"^#\s*gradlint:\s*noqa(?::\s*(?P<codes>{_CODES}))?\s*$", re.IGNORECASE)

ALL = frozenset({"*"})


@dataclass
class Suppressions:
    by_line: dict[int, frozenset[str]] = field(default_factory=dict)
    file_wide: frozenset[str] = frozenset()

    def silences(self, code: str, line: int, end_line: int = 0) -> bool:
        if self._match(self.file_wide, code):
            return True
        return any(self._match(self.by_line.get(n, frozenset()), code) for n in {line, end_line or line})

    @staticmethod
    def _match(codes: frozenset[str], code: str) -> bool:
        return bool(codes) and ("*" in codes or code in codes)


def _codes(text: str | None) -> frozenset[str]:
    if not text:
        return ALL
    return frozenset(c.strip().upper() for c in text.split(","))


def tokens_of(source: str) -> list[tokenize.TokenInfo] | None:
    """The source's tokens, lines numbered as fixes.split_lines numbers them; None when it does
    not tokenize."""
    try:
        return list(tokenize.generate_tokens(io.StringIO(source, newline=None).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None


def comment_lines(tokens: list[tokenize.TokenInfo]) -> dict[int, int]:
    """Each line that cannot end in a comment -> the line whose end can take the comment for it:
    the lines of a multi-line string (or, on 3.12, an f-string's middle) go to its last line,
    a line ending in a backslash to the line it continues on, through any chain of both."""
    joined: dict[int, int] = {}
    previous = None
    for token in tokens:
        if token.start[0] < token.end[0] and token.type not in (tokenize.NL, tokenize.NEWLINE):
            for line in range(token.start[0], token.end[0]):
                joined[line] = token.end[0]
        if previous is not None and token.start[0] > previous.end[0] and previous.type not in (
                tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENCODING, tokenize.INDENT,
                tokenize.DEDENT) and token.type != tokenize.ENDMARKER:
            # No line break token between two tokens on different lines: a backslash joined them.
            for line in range(previous.end[0], token.start[0]):
                joined[line] = token.start[0]
        previous = token
    resolved = {}
    for line in joined:
        end = line
        while end in joined:
            end = joined[end]
        resolved[line] = end
    return resolved


def find_suppressions(source: str) -> Suppressions:
    """Read comments with the tokenizer so that `# noqa` inside a string does not count."""
    found = Suppressions()
    if "noqa" not in source and "gradlint:" not in source:
        return found
    tokens = tokens_of(source)
    if tokens is None:
        return found
    file_wide: set[str] = set()
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        text = token.string
        line = token.start[0]
        file_match = _FILE.match(text)
        if file_match and token.line.strip() == text.strip():
            file_wide |= _codes(file_match.group("codes"))
            continue
        codes: set[str] = set()
        for match in _NOQA.finditer(text):
            codes |= _codes(match.group("codes"))
        for match in _IGNORE.finditer(text):
            codes |= _codes(match.group("codes"))
        if codes:
            found.by_line[line] = found.by_line.get(line, frozenset()) | frozenset(codes)
    if found.by_line:
        for line, end in comment_lines(tokens).items():
            if end in found.by_line:
                found.by_line[line] = found.by_line.get(line, frozenset()) | found.by_line[end]
    found.file_wide = frozenset(file_wide)
    return found
