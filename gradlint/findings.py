"""The plain data every part passes around: severities, findings, per-file results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from gradlint.links import rule_url


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"

    @classmethod
    def parse(cls, text: str) -> "Severity":
        try:
            return cls(text.lower())
        except ValueError:
            raise ValueError(f"unknown severity {text!r}: use error, warning or note") from None


class Applicability(enum.Enum):
    """ruff's fix safety: a safe fix keeps the program's meaning, an unsafe one may change it
    (a type, an exception) and is applied only with --unsafe-fixes."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True, order=True)
class Edit:
    """Replace source[start:end] (character offsets) with `content`; an insertion has start == end.
    Rows and columns (1-based, end exclusive) are the same span, for reporters."""

    start: int
    end: int
    content: str
    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Fix:
    message: str
    applicability: Applicability
    edits: tuple[Edit, ...]


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    column: int
    code: str
    message: str
    name: str = ""
    severity: Severity = field(default=Severity.ERROR, compare=False)
    end_line: int = 0
    end_column: int = 0
    subject: str = field(default="", compare=False)
    fix: Fix | None = field(default=None, compare=False)

    @property
    def url(self) -> str:
        return rule_url(self.code)


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    analyzed: bool = False  # parsed and run through the rules (False: skipped by the text pre-filter)
    cached: bool = False  # findings read from the result cache
    internal_error: str | None = None  # a crash inside gradlint itself while checking this file
    fixed_source: str | None = None  # with --fix/--diff: the file's text after the fixes, when they changed it
    fixes_applied: int = 0
    unfixed_findings: list[Finding] = field(default_factory=list)  # reported when the fixes cannot be written
    source_digest: str = ""  # of the text the fixes were made to, to notice a file changed meanwhile
    # The other project modules the findings rest on (path -> what was read of each): a cached
    # result holds while each of them is byte for byte the same, or still reads the same there.
    depends: dict[str, "Reads"] = field(default_factory=dict)


class Reads(NamedTuple):
    """What a checked file's findings read of another module of the project: the module's dotted
    name (its relative imports start from it), the digest of its bytes, and the digest of each part
    read (`ModuleFacts.part`: a name looked up, a model of some statements, a statement's text).
    An edit that changes the bytes but none of those parts leaves the findings as they were.
    Two parts stand for the file system itself: `absent` (a module looked for there in vain) and
    `exists` ("yes"/"no": an `__init__.py` or project marker that decided the file's roots)."""

    dotted: str
    digest: str
    parts: dict[str, str]
