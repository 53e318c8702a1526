"""What a rule is: a code, a doc in ruff's shape, examples, and a check over a `FileModel`."""

from __future__ import annotations

import ast

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable

import libcst as cst

from gradlint.findings import Applicability, Severity

if TYPE_CHECKING:
    from gradlint.file_model import FileModel


@dataclass(frozen=True)
class Replace:
    """Put `text` where `node` is."""

    node: cst.CSTNode
    text: str


@dataclass(frozen=True)
class InsertLineAbove:
    """A new line above the line `node` starts on, indented as that line is."""

    node: cst.CSTNode
    text: str


@dataclass(frozen=True)
class DeleteLines:
    """Remove the lines `node` spans; only when nothing but whitespace or a comment shares them."""

    node: cst.CSTNode


Change = Replace | InsertLineAbove | DeleteLines


@dataclass(frozen=True)
class FixPlan:
    """A fix in terms of syntax nodes; the engine turns it into text edits once positions are known.
    `text` uses "\n" for line breaks: the engine writes the file's own newline."""

    message: str
    applicability: Applicability
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class Hit:
    """A rule's report before positions are known: the node, the message, and a severity
    when it differs from the rule's default (GL101 on a view of the output is worse than on an input)."""

    node: cst.CSTNode
    message: str
    severity: Severity | None = None
    # What holds the value, named as a user would: `ScatterSum.ctx.out`, `Encoder.activations`,
    # `HISTORY`. The runtime probe joins its measured holders to findings through it.
    subject: str = ""
    fix: FixPlan | None = None


@dataclass(frozen=True)
class Invalid:
    """An example the rule must flag, exactly on the lines that contain each of `flagged`."""

    source: str
    flagged: tuple[str, ...]
    # The source after `--fix --unsafe-fixes`, for a rule with fixes: the test suite applies them.
    fixed: str | None = None


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity] = Severity.ERROR
    summary: ClassVar[str]  # one line, for `gradlint rules`
    doc: ClassVar[str]  # What it does / Why is this bad? / Example / Use instead
    # Text that must occur in a file's code for the rule to find anything there: a string, or a
    # tuple of strings that must all occur. Looked for in the text first, then in the code alone
    # (comments and string literals left out: gradlint/code_text.py), so a marker holds no quote,
    # `#` or line break.
    # Files with none of the selected rules' markers are not parsed by libcst (most of torch's
    # own files have none).
    markers: ClassVar[tuple[str | tuple[str, ...], ...]]
    default_enabled: ClassVar[bool] = True
    # "" (no fix), "safe", "unsafe", or "safe or unsafe" (by case): what `gradlint rules` shows; the
    # doc's "## Fix safety" section says which case is which.
    fix_safety: ClassVar[str] = ""
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[Invalid, ...]] = ()

    def precheck(self, tree: ast.Module) -> bool:
        """Whether CPython's tree of the file can hold a finding. Cheap structural questions only
        (see gradlint/prechecks.py); the real analysis runs on libcst's tree afterwards."""
        return True

    def check(self, model: "FileModel") -> Iterable[Hit]:
        raise NotImplementedError
