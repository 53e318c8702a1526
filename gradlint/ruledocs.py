"""Each rule's documentation page, `docs/rules/GL101.md`, ..., generated from the rule classes.

Every finding's `url` (JSON, SARIF, `gradlint rule`) points at its page here, so the pages must
exist and say what the rule class says: `python -m gradlint.ruledocs` writes them,
`python -m gradlint.ruledocs --check` exits 1 when a page is missing, stale or left over, and
tests/test_rule_docs.py runs the same comparison in memory.

The address pages live at is gradlint/links.py's.
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from gradlint.links import BRANCH, DOCS_DIR, REPOSITORY_URL, rule_url  # noqa: F401 - re-exported


@dataclass(frozen=True)
class EngineCode:
    """A code the engine reports itself (no Rule class): documented here, in a rule doc's shape."""

    code: str
    name: str
    summary: str
    doc: str
    silenceable: bool = False  # whether `# noqa: CODE` silences it
    fix_safety: str = ""  # as a rule's: "" (no fix), "safe", ...


# GL000 and GL001 come from the engine when no rule could run on a file, GL002 once the rules have
# run; SARIF lists them beside the rules, and their findings carry a url like any other.
ENGINE_CODES = (
    EngineCode("GL000", "syntax-error", "the file does not parse, so no rule checked it", """
## What it does
Reports a file that Python (or libcst) cannot parse, at the line and column of the syntax error.
No rule runs on that file until it parses.

## Why is this bad?
A file gradlint cannot parse is a file it cannot vouch for: it reports the syntax error instead of
passing the file silently. 3.12 syntax (`type X = ...`, `def f[T]`) is read on Python 3.10 and
3.11 too, since libcst parses it.

## Fix safety
No fix. `# noqa` does not silence it: fix the syntax error.
"""),
    EngineCode("GL001", "unreadable-file", "the file cannot be read or parsed, so no rule checked it", """
## What it does
Reports a file gradlint cannot read: not UTF-8, NUL bytes, over `max-file-size`, not a regular
file, a symlink loop, or nested too deeply to parse. No rule runs on that file.

## Why is this bad?
The file was not checked; the finding says why, so that a file is never skipped without a word.
Exclude it (`extend-exclude`), or raise `max-file-size` for a large generated file.

## Fix safety
No fix. `# noqa` does not silence it.
"""),
    EngineCode("GL002", "unused-noqa", "a `# noqa` names a GL code that silenced nothing, or one that does not exist", """
## What it does
Reports a `# noqa: GL101`, `# gradlint: ignore[GL101]` or file-wide `# gradlint: noqa: GL101` that
silenced no finding of that code in the file, and a GL code gradlint does not have (`GL999`), as
ruff's `RUF100` does. Codes a rule's gates show cannot occur in the file (the file never mentions
autograd, say) count as unused: that rule has no finding there. A `# noqa` at the end of a
multi-line string or of backslash-joined lines covers every line of that run, so a finding on any
of them uses it. `# noqa: GL000` and `# noqa: GL001` are unused wherever they are: no comment
silences those codes.

## Why is this bad?
A stale suppression hides the next real finding: the leak was fixed or the code moved, the comment
stayed, and it silences what that rule finds on the line later. An unknown code (a typo for
`GL101`) silences nothing at all.

## What is not reported
- Other tools' codes (`E501`, `F401`, `BLE001`), a bare `# noqa` and a bare `# gradlint: noqa`:
  they are other tools' business, or silence everything.
- A code the file is not checked for (not selected, in `ignore`, or in the file's
  `per-file-ignores`): whether it would have a finding there cannot be told.
- Anything in a file whose check did not finish (`GL000`, `GL001`, an internal error).
- `GL002` itself: `# noqa: GL101, GL002` keeps its directive as it is.

## On by default
Yes, unlike ruff's `RUF100`: it reads gradlint's own codes only, so it never argues with another
tool's comment, and it reports only what the run has seen: a code checked in the file, no
finding of it under the comment. Turn it off with `ignore = ["GL002"]`.

## Fix safety
Safe: it removes the codes (`# noqa: E501, GL101` becomes `# noqa: E501`), or, when the directive
named nothing else, the directive with the blanks before it, keeping a comment that goes on after
it (`# noqa: GL101  # type: ignore` becomes `# type: ignore`); a line left empty goes. Only a
comment changes, never the code.
""", silenceable=True, fix_safety="safe"),
)


@dataclass(frozen=True)
class RulePage:
    """What a page says, whatever the source: a Rule instance or an EngineCode."""

    code: str
    name: str
    summary: str
    doc: str
    severity: str
    default_enabled: bool
    fix_safety: str
    valid: tuple[str, ...]
    invalid: tuple[tuple[str, tuple[str, ...]], ...]  # (source, the flagged lines' text)
    engine: bool = False
    silenceable: bool = True


def pages() -> list[RulePage]:
    """Every documented code, sorted: the engine's and every registered rule's, read now (the
    rule classes are the source of truth; nothing here caches their text)."""
    from gradlint.registry import all_rules

    found = [RulePage(c.code, c.name, c.summary, c.doc, "error", True, c.fix_safety, (), (), engine=True,
                      silenceable=c.silenceable) for c in ENGINE_CODES]
    for rule in all_rules():
        found.append(RulePage(
            rule.code, rule.name, rule.summary, rule.doc, rule.severity.value, rule.default_enabled,
            rule.fix_safety, tuple(rule.VALID), tuple((i.source, tuple(i.flagged)) for i in rule.INVALID)))
    return sorted(found, key=lambda p: p.code)


def page_by_code(code: str) -> RulePage | None:
    return next((p for p in pages() if p.code == code.upper()), None)


def _code_block(source: str) -> str:
    body = textwrap.dedent(source).strip("\n")
    fence = "````" if "```" in body else "```"
    return f"{fence}python\n{body}\n{fence}\n"


def _examples(page: RulePage) -> str:
    if not page.valid and not page.invalid:
        return ""
    parts = ["\n## Examples from the test suite\n\n"
             "`tests/test_rule_examples.py` checks each of these: the rule flags exactly the lines named "
             "under a flagged example, and nothing in a clean one.\n"]
    if page.invalid:
        parts.append(f"\n<details><summary>Flagged ({len(page.invalid)})</summary>\n")
        for source, flagged in page.invalid:
            lines = ", ".join(f"`{line.strip()}`" for line in flagged)
            parts.append(f"\nFlagged at {lines}:\n\n{_code_block(source)}")
        parts.append("\n</details>\n")
    if page.valid:
        parts.append(f"\n<details><summary>Not flagged ({len(page.valid)})</summary>\n")
        for source in page.valid:
            parts.append(f"\n{_code_block(source)}")
        parts.append("\n</details>\n")
    return "".join(parts)


def _fix_line(page: RulePage) -> str:
    if not page.fix_safety:
        return "none"
    return f"{page.fix_safety} (`--fix`{' --unsafe-fixes' if 'unsafe' in page.fix_safety else ''})"


def render_page(page: RulePage) -> str:
    """One code's page, in ruff's shape: the doc's own sections, then a Fix safety section when the
    doc has none, then the rule's test examples."""
    doc = page.doc.strip()
    if "## Fix safety" not in doc and not page.fix_safety:
        doc += "\n\n## Fix safety\nNo fix: the finding says what to change."
    enabled = "yes" if page.default_enabled else "no (turn it on with `extend-select`)"
    silence = f"`# noqa: {page.code}`" if page.silenceable else "not possible: fix or exclude the file"
    source = "reported by the engine" if page.engine else f"rule `{page.name}`"
    header = (f"# {page.code}: {page.name}\n\n"
              f"{page.summary[:1].upper()}{page.summary[1:]}.\n\n"
              f"| | |\n|---|---|\n"
              f"| Code | `{page.code}` ({source}) |\n"
              f"| Default severity | {page.severity} |\n"
              f"| On by default | {enabled} |\n"
              f"| Fix | {_fix_line(page)} |\n"
              f"| Silence one line | {silence} |\n\n")
    footer = (f"\n---\nGenerated from the rule class by `python -m gradlint.ruledocs`; "
              f"`gradlint rule {page.code}` prints the same doc.\n")
    return header + doc + "\n" + _examples(page) + footer


def render_index(all_pages: list[RulePage]) -> str:
    rows = "".join(f"| [{p.code}]({p.code}.md) | {p.name} | {p.severity} | {p.fix_safety or '-'} | {p.summary} |\n"
                   for p in all_pages)
    return ("# gradlint rules\n\nOne page per code, generated by `python -m gradlint.ruledocs` from the rule "
            "classes in `rules/`.\n\n| code | name | default severity | fix | what it flags |\n"
            "|------|------|------------------|-----|---------------|\n" + rows)


def generate() -> dict[str, str]:
    """File name (inside docs/rules) -> the text it must hold."""
    all_pages = pages()
    files = {f"{p.code}.md": render_page(p) for p in all_pages}
    files["README.md"] = render_index(all_pages)
    return files


def differences(directory: Path) -> list[str]:
    """What in `directory` differs from what `generate()` gives: one line per file."""
    wanted = generate()
    problems = []
    for name, text in sorted(wanted.items()):
        path = directory / name
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            problems.append(f"{path}: missing")
            continue
        if current != text:
            problems.append(f"{path}: stale")
    if directory.is_dir():
        for path in sorted(directory.glob("*.md")):
            if path.name not in wanted:
                problems.append(f"{path}: no such code any more")
    return problems


def write(directory: Path) -> list[str]:
    """Write every page (and remove pages of codes that are gone); the names changed."""
    problems = differences(directory)
    directory.mkdir(parents=True, exist_ok=True)
    wanted = generate()
    for name, text in wanted.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    for path in directory.glob("*.md"):
        if path.name not in wanted:
            path.unlink()
    return problems


def main(argv: list[str] | None = None) -> int:
    import argparse  # only for the command line: findings.py imports this module

    parser = argparse.ArgumentParser(prog="python -m gradlint.ruledocs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    parser.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent.parent / DOCS_DIR,
                        help=f"where the pages go (default: the checkout's {DOCS_DIR})")
    args = parser.parse_args(argv)
    if args.check:
        problems = differences(args.dir)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print("gradlint: rule docs are stale: run `python -m gradlint.ruledocs`", file=sys.stderr)
        return 1 if problems else 0
    changed = write(args.dir)
    print(f"{len(changed)} page{'s' if len(changed) != 1 else ''} written in {args.dir}"
          if changed else f"rule docs in {args.dir} are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
