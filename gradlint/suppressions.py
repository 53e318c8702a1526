"""`# noqa` and `# gradlint:` comments: which findings the author has silenced, and which of those
comments silenced nothing (GL002, ruff's RUF100).

A comment cannot go inside a multi-line string or after a backslash continuation, so, as in ruff,
a noqa at the end of such a run of lines covers every line of it: the one after the closing
quotes covers the string's lines, the one after `\\`-joined lines covers all of them. Use is
therefore tracked per comment, not per line: each finding silenced marks the comments that
silenced it, whatever line of their run it is on."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Collection
from dataclasses import dataclass, field

from gradlint.findings import Applicability, Edit, Finding, Fix, Severity
from gradlint.fixes import SourceLines

_CODES = r"[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*"
_NOQA = re.compile(rf"#\s*noqa(?::\s*(?P<codes>{_CODES}))?", re.IGNORECASE)
_IGNORE = re.compile(rf"#\s*gradlint:\s*ignore\[(?P<codes>{_CODES})\]", re.IGNORECASE)
_FILE = re.compile(rf"^#\s*gradlint:\s*noqa(?::\s*(?P<codes>{_CODES}))?\s*$", re.IGNORECASE)
_ONE_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)
_OUR_CODE = re.compile(r"GL[0-9]+")  # on the upper-cased code: other tools' codes are theirs

ALL = frozenset({"*"})


@dataclass(frozen=True)
class Directive:
    """One `# noqa[: codes]`, `# gradlint: ignore[codes]` or file-wide `# gradlint: noqa[: codes]`
    as written: `start`/`end` are its span in its comment, each code's span likewise."""

    line: int
    column: int  # 0-based, of the comment
    comment: str
    start: int
    end: int
    codes: tuple[tuple[str, int, int], ...]  # (CODE in upper case, start, end); empty: a bare one
    kind: str  # "noqa", "gradlint: ignore" or "gradlint: noqa" (file-wide)

    @property
    def code_set(self) -> frozenset[str]:
        return frozenset(code for code, _, _ in self.codes) if self.codes else ALL


@dataclass
class Suppressions:
    by_line: dict[int, frozenset[str]] = field(default_factory=dict)
    file_wide: frozenset[str] = frozenset()
    directives: list[Directive] = field(default_factory=list)
    # line -> the line-level directives that cover it (by index); file-wide ones cover every line
    covering: dict[int, tuple[int, ...]] = field(default_factory=dict)
    file_directives: tuple[int, ...] = ()
    used: set[tuple[int, str]] = field(default_factory=set)  # (directive index, code it silenced)

    def silences(self, code: str, line: int, end_line: int = 0) -> bool:
        """Whether a finding of `code` on those lines is silenced; every directive that silences
        it is marked used (a redundant second one too: removing either alone keeps it silenced,
        and a fix that removed both would bring the finding back)."""
        silenced = False
        for index in self.file_directives:
            if self._match(self.directives[index].code_set, code):
                self.used.add((index, code))
                silenced = True
        for number in {line, end_line or line}:
            for index in self.covering.get(number, ()):
                if self._match(self.directives[index].code_set, code):
                    self.used.add((index, code))
                    silenced = True
        return silenced

    @staticmethod
    def _match(codes: frozenset[str], code: str) -> bool:
        return bool(codes) and ("*" in codes or code in codes)

    def unused(self, checked: Collection[str], known: Collection[str],
               skipped: Collection[str] = ()) -> list[tuple[Directive, list[str], list[str]]]:
        """Each directive with gradlint codes it lists in vain: (directive, unused, unknown).
        `checked`: the codes whose every finding in this file was reported to `silences` (the
        rules that ran or were gated out, the engine's unsilenceable ones); `known`: every code
        gradlint has; `skipped`: codes never reported (GL002 itself). A known code that is not
        checked (not selected, ignored for this file) may be in use: it is left alone. Other
        tools' codes and bare directives are never reported."""
        found = []
        for index, directive in enumerate(self.directives):
            unused: list[str] = []
            unknown: list[str] = []
            for code, _, _ in directive.codes:
                if not _OUR_CODE.fullmatch(code) or code in skipped or code in unused or code in unknown:
                    continue
                if code not in known:
                    unknown.append(code)
                elif code in checked and (index, code) not in self.used:
                    unused.append(code)
            if unused or unknown:
                found.append((directive, unused, unknown))
        return found


def _codes(text: str | None) -> frozenset[str]:
    if not text:
        return ALL
    return frozenset(c.strip().upper() for c in text.split(","))


def may_hold_our_codes(source: str) -> bool:
    """Whether the text may hold a directive naming a GL code: a cheap test (60 ms over torch's
    2285 files, most of it the substring test find_suppressions makes anyway) before a file pays
    for the tokenizer only to be told its comments are all used."""
    if "noqa" not in source and "gradlint:" not in source:  # find_suppressions' own gate
        return False
    lowered = source.lower()
    return _GL_CODE.search(lowered) is not None and (
        _NOQA_GL.search(lowered) is not None or _IGNORE_GL.search(lowered) is not None)


# On lower-cased text, each led by a literal, which the regex engine searches for fast.
_GL_CODE = re.compile(r"gl[0-9]")
_NOQA_GL = re.compile(r"noqa\s*:[\s,a-z0-9]*?gl[0-9]")
_IGNORE_GL = re.compile(r"ignore\[[\s,a-z0-9]*?gl[0-9]")


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


def _directive(match: re.Match, line: int, column: int, text: str, kind: str) -> Directive:
    codes: tuple[tuple[str, int, int], ...] = ()
    if match.group("codes"):
        base = match.start("codes")
        codes = tuple((m.group().upper(), base + m.start(), base + m.end())
                      for m in _ONE_CODE.finditer(match.group("codes")))
    return Directive(line, column, text, match.start(), match.end(), codes, kind)


def find_suppressions(source: str) -> Suppressions:
    """Read comments with the tokenizer so that `# noqa` inside a string does not count."""
    found = Suppressions()
    if "noqa" not in source and "gradlint:" not in source:
        return found
    tokens = tokens_of(source)
    if tokens is None:
        return found
    file_wide: set[str] = set()
    by_comment_line: dict[int, list[int]] = {}
    file_directives: list[int] = []
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        text = token.string
        line, column = token.start
        file_match = _FILE.match(text)
        if file_match and token.line.strip() == text.strip():
            file_wide |= _codes(file_match.group("codes"))
            file_directives.append(len(found.directives))
            found.directives.append(_directive(file_match, line, column, text, "gradlint: noqa"))
            continue
        codes: set[str] = set()
        for pattern, kind in ((_NOQA, "noqa"), (_IGNORE, "gradlint: ignore")):
            for match in pattern.finditer(text):
                codes |= _codes(match.group("codes"))
                by_comment_line.setdefault(line, []).append(len(found.directives))
                found.directives.append(_directive(match, line, column, text, kind))
        if codes:
            found.by_line[line] = found.by_line.get(line, frozenset()) | frozenset(codes)
    covering = {line: tuple(indices) for line, indices in by_comment_line.items()}
    if found.by_line:
        for line, end in comment_lines(tokens).items():
            if end in found.by_line:
                found.by_line[line] = found.by_line.get(line, frozenset()) | found.by_line[end]
                covering[line] = covering.get(line, ()) + covering[end]
    found.covering = covering
    found.file_directives = tuple(file_directives)
    found.file_wide = frozenset(file_wide)
    return found


# ----- GL002: the directives that silence nothing ------------------------------------------

# What Python reads in a file's first two lines (PEP 263's cookie, the kernel's #!).
_HEADER = re.compile(r"[ \t\f]*#.*?coding[:=]|#!")

MESSAGE_LIMIT = 120  # a message is one line: the codes past what fits are counted, not named


def _listed(codes: list[str], shown: int) -> str:
    named = ", ".join(codes[:shown])
    return named if len(codes) <= shown else f"{named} (+{len(codes) - shown} more)"


def unused_message(kind: str, unused: list[str], unknown: list[str]) -> str:
    """One line: what is wrong with the directive and what to do."""
    for shown in (3, 2, 1):
        parts = []
        if unused:
            parts.append(f"unused `{kind}` for {_listed(unused, shown)}")
        if unknown:
            plural = "s" if len(unknown) > 1 else ""
            parts.append(f"unknown code{plural} {_listed(unknown, shown)}" + ("" if unused else f" in `{kind}`"))
        message = f"{' and '.join(parts)}; remove {'it' if len(unused) + len(unknown) == 1 else 'them'}"
        if len(message) <= MESSAGE_LIMIT:
            break
    return message


def removal(directive: Directive, drop: Collection[str], lines: SourceLines) -> tuple[str, Edit]:
    """The edit that takes the codes in `drop` out of the directive, with its fix's message: the
    codes alone when others stay (`# noqa: E501, GL101` -> `# noqa: E501`), else the directive
    with the blanks before it, keeping a comment that goes on after it; a line left empty goes
    (ruff's deletion of an unused noqa)."""
    line_start = lines.starts[directive.line - 1]
    body = lines.source[line_start:lines.line_end(directive.line)].rstrip("\r\n")
    at = directive.column  # the comment's offset in its line
    kept = [directive.comment[start:end] for code, start, end in directive.codes if code not in drop]
    if kept:
        start, end = at + directive.codes[0][1], at + directive.codes[-1][2]
        removed = ", ".join(dict.fromkeys(code for code, _, _ in directive.codes if code in drop))
        return f"Remove {removed} from the `{directive.kind}`", \
            lines.edit(line_start + start, line_start + end, ", ".join(kept))
    message = f"Remove the unused `{directive.kind}`"
    start, end = at + directive.start, at + directive.end
    before = len(body[:start]) - len(body[:start].rstrip(" \t\f"))
    after = len(body[end:]) - len(body[end:].lstrip(" \t\f"))
    if start - before == 0 and end + after == len(body):  # the line holds nothing else
        if directive.line <= 2 and any(_HEADER.match(lines.source[lines.starts[n - 1]:lines.line_end(n)])
                                       for n in range(directive.line + 1, min(3, len(lines.starts)) + 1)):
            # A coding cookie or a #! line below would move up into the first two lines, where
            # Python reads it: only the text goes, the line stays.
            return message, lines.edit(line_start, line_start + len(body), "")
        return message, lines.edit(line_start, lines.line_end(directive.line), "")
    if end + after == len(body):  # it ends the line: the blanks before it go too
        return message, lines.edit(line_start + start - before, line_start + len(body), "")
    if body[end + after:].startswith("#"):  # another comment follows (`# type: ignore`): it stays
        return message, lines.edit(line_start + start, line_start + end + after, "")
    # Text follows the codes (an explanation): it stays, as a comment of its own.
    return message, lines.edit(line_start + start, line_start + end + after, "# ")


def unused_findings(source: str, path: str, suppressions: Suppressions, code_name: tuple[str, str],
                    checked: Collection[str], known: Collection[str], severity: Severity) -> list[Finding]:
    """A finding of `code_name` for each directive that lists GL codes in vain (see
    `Suppressions.unused`), each with the safe fix that removes those codes."""
    found = suppressions.unused(checked, known, skipped=(code_name[0],))
    if not found:
        return []
    lines = SourceLines(source)
    findings = []
    for directive, unused, unknown in found:
        message, edit = removal(directive, set(unused) | set(unknown), lines)
        column = directive.column + directive.start + 1
        findings.append(Finding(
            path=path, line=directive.line, column=column, code=code_name[0], name=code_name[1],
            message=unused_message(directive.kind, unused, unknown), severity=severity,
            end_line=directive.line, end_column=directive.column + directive.end + 1,
            fix=Fix(message, Applicability.SAFE, (edit,))))
    return findings
