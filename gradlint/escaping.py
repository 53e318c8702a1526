"""Text made safe to show: what a terminal would act on, and what strict JSON parsers reject,
written as backslash escapes. Every reporter's output goes through these."""

from __future__ import annotations

import re
from typing import Any


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
