"""`# noqa` and `# gradlint:` comments: which findings the author has silenced."""

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


def find_suppressions(source: str) -> Suppressions:
    """Read comments with the tokenizer so that `# noqa` inside a string does not count."""
    found = Suppressions()
    if "noqa" not in source and "gradlint:" not in source:
        return found
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
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
    found.file_wide = frozenset(file_wide)
    return found
