"""Lint sources: pre-filter, parse once, build the file model, run the selected rules, place
and filter the findings. Knows no rule by name."""

from __future__ import annotations

import ast
import gc
import os
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from gradlint.config import Settings
from gradlint.file_model import FileModel
from gradlint.fixes import SourceLines, apply_fixes, plan_to_fix
from gradlint.findings import FileResult, Finding, Severity
from gradlint.registry import all_rules
from gradlint.rule import Hit, Rule
from gradlint.cache import ResultCache
from gradlint.source import Unreadable, decode_source, read_bytes, text_digest
from gradlint.suppressions import find_suppressions

SYNTAX_ERROR = ("GL000", "syntax-error")
UNREADABLE = ("GL001", "unreadable-file")


@dataclass(frozen=True)
class RuleSet:
    """The rules a run applies, resolved once from the settings (per worker, not per file)."""

    rules: tuple[Rule, ...]
    severity: dict[str, Severity]

    @classmethod
    def from_settings(cls, settings: Settings) -> "RuleSet":
        rules = all_rules()
        codes = [r.code for r in rules]
        defaults = [r.code for r in rules if r.default_enabled]
        enabled = settings.enabled_codes(codes, defaults)
        return cls(tuple(r for r in rules if r.code in enabled), dict(settings.severity))

    def key(self, max_bytes: int) -> str:
        """Everything besides the file's bytes and gradlint's build that decides its findings."""
        severities = ",".join(f"{code}={severity.value}" for code, severity in sorted(self.severity.items()))
        return f"{','.join(sorted(r.code for r in self.rules))};{severities};{max_bytes}"

    def without(self, codes: frozenset[str]) -> "RuleSet":
        if not codes:
            return self
        return RuleSet(tuple(r for r in self.rules if r.code not in codes), self.severity)


def _finding(path: str, code_name: tuple[str, str], line: int, column: int, message: str) -> Finding:
    return Finding(path=path, line=line, column=column, code=code_name[0], name=code_name[1],
                   message=message, severity=Severity.ERROR, end_line=line, end_column=column)


def _rules_marked_in(source: str, rules: Sequence[Rule]) -> list[Rule]:
    """The rules one of whose markers the text holds. Rules share needles ("autograd" is in
    eight of them): each is looked for once per file, which halves this pass on torch's sources."""
    seen: dict[str, bool] = {}

    def holds(needle: str) -> bool:
        found = seen.get(needle)
        if found is None:
            found = seen[needle] = needle in source
        return found

    return [rule for rule in rules if any(
        holds(marker) if isinstance(marker, str) else all(holds(part) for part in marker)
        for marker in rule.markers)]


def _python_ast(source: str, path: str) -> ast.Module | Finding | None:
    """CPython's own parse: about 10x cheaper than libcst, and its syntax messages ("'(' was
    never closed") are the ones users know. None: valid Python newer than the one running."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `"\e"` in the user's strings: not ours to report
            return compile(source, path, "exec", ast.PyCF_ONLY_AST)
    except SyntaxError as error:
        if _newer_syntax(source):
            return None
        return _finding(path, SYNTAX_ERROR, error.lineno or 1, error.offset or 1, f"syntax error: {error.msg}")
    except (RecursionError, MemoryError, ValueError):
        return _finding(path, UNREADABLE, 1, 1, "too deeply nested to parse")


def _newer_syntax(source: str) -> bool:
    """Whether a file this Python rejects is still Python libcst reads: 3.12's `type X = ...` and
    `def f[T]` checked on 3.10 or 3.11. Asked only of files with a syntax error."""
    if sys.version_info >= (3, 12):
        return False  # nothing libcst reads is newer than 3.12's grammar
    try:
        cst.parse_module(source)
    except Exception:  # noqa: BLE001 - any failure means: report CPython's syntax error
        return False
    return True


def _syntax_error(source: str, path: str) -> Finding | None:
    """CPython's syntax check without building Python AST objects: compiling to bytecode takes half
    the time of an AST parse (7.1 s against 13.5 s for torch's 2285 files, measured). The compiler
    also rejects what only it checks (`return` outside a function); files with rules to run get an
    AST parse only, so such a file is re-read that way and reported the same in both cases."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarning for invalid escapes: not ours to report
        try:
            compile(source, path, "exec", dont_inherit=True)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            tree = _python_ast(source, path)
            return tree if isinstance(tree, Finding) else None
    return None


def _precheck(rule: Rule, tree: ast.Module) -> bool:
    try:
        return rule.precheck(tree)
    except Exception:  # noqa: BLE001 - a precheck only saves time: if it fails, the rule itself decides
        # (a RecursionError too: libcst then meets the same depth and says so, GL001)
        return True


def lint_source(source: str, path: str, ruleset: RuleSet) -> FileResult:
    """Lint one file's text. Never raises for bad input: it becomes a GL000/GL001 finding.

    Three gates, cheapest first: each rule's text markers, then CPython's parse (which also
    reports syntax errors for every file) and each rule's precheck of that tree, and only then
    the libcst parse and the analysis, for the rules still in play."""
    result = FileResult(path)
    rules = _rules_marked_in(source, ruleset.rules)
    if not rules:  # only the syntax check is left
        error = _syntax_error(source, path)
        if error is not None:
            result.findings.append(error)
        return result
    tree = _python_ast(source, path)
    if isinstance(tree, Finding):
        result.findings.append(tree)
        return result
    # Newer syntax than this Python's: no tree to precheck, so every rule goes on to libcst.
    rules = [r for r in rules if tree is None or _precheck(r, tree)]
    if not rules:
        return result
    result.analyzed = True
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:  # CPython accepted it: syntax libcst does not support
        message = str(error.message).strip().splitlines()[0] if error.message else "invalid syntax"
        result.findings.append(_finding(path, SYNTAX_ERROR, error.raw_line, error.raw_column + 1,
                                        f"libcst cannot parse this file: {message}"))
        return result
    except RecursionError:
        result.findings.append(_finding(path, UNREADABLE, 1, 1, "too deeply nested to parse"))
        return result
    try:
        model = FileModel(module, path, source)
        hits: list[tuple[Rule, Hit]] = []
        for rule in rules:
            hits.extend((rule, hit) for hit in rule.check(model))
        if hits:
            positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    except RecursionError:
        result.findings.append(_finding(path, UNREADABLE, 1, 1, "too deeply nested to analyze"))
        return result
    except Exception as error:  # a bug of ours: say where, keep the run going, exit 2 at the end
        result.internal_error = f"{type(error).__name__}: {error}"
        return result
    suppressions = find_suppressions(source) if hits else None
    lines = SourceLines(source) if any(hit.fix for _, hit in hits) else None
    seen: set[tuple[str, int, int]] = set()
    for rule, hit in hits:
        where = positions.get(hit.node)
        if where is None:
            continue
        line, column = where.start.line, where.start.column + 1
        key = (rule.code, line, column)
        if key in seen:  # a helper walked from two call sites reports once
            continue
        seen.add(key)
        if suppressions is not None and suppressions.silences(rule.code, line, where.end.line):
            continue
        severity = ruleset.severity.get(rule.code) or hit.severity or rule.severity
        fix = plan_to_fix(hit.fix, positions, lines) if hit.fix is not None and lines is not None else None
        result.findings.append(Finding(
            path=path, line=line, column=column, code=rule.code, name=rule.name, message=hit.message,
            severity=severity, end_line=where.end.line, end_column=where.end.column + 1, subject=hit.subject,
            fix=fix))
    result.findings.sort()
    return result


# A fix can make another applicable (GL101's second attribute joins the first one's
# save_for_backward call); ruff stops after 100 rounds, but our fixes settle in two or three.
MAX_FIX_ROUNDS = 10


def fix_source(source: str, path: str, ruleset: RuleSet, unsafe: bool) -> FileResult:
    """Lint, apply the fixes that do not overlap, re-lint the result, until nothing more applies.
    The result's findings are those left in the fixed source; `fixed_source` is set when it changed."""
    result = first = lint_source(source, path, ruleset)
    fixed = 0
    current = source
    for _ in range(MAX_FIX_ROUNDS):
        if result.internal_error:
            break
        candidate, count = apply_fixes(current, result.findings, unsafe)
        if count == 0 or candidate == current:
            break
        if isinstance(_python_ast(candidate, path), Finding):  # a bug of ours: keep the last good text
            result.internal_error = "a fix produced code that does not parse; the remaining fixes were not applied"
            break
        current, fixed = candidate, fixed + count
        result = lint_source(current, path, ruleset)
    result.fixes_applied = fixed
    if current != source:
        result.fixed_source = current
        result.source_digest = text_digest(source)
        result.unfixed_findings = first.findings
    return result


def lint_bytes(data: bytes, path: str, ruleset: RuleSet, max_bytes: int) -> FileResult:
    source = decode_source(data, max_bytes)
    if isinstance(source, Unreadable):
        return FileResult(path, [_finding(path, UNREADABLE, 1, 1, source.reason)])
    return lint_source(source, path, ruleset)


def lint_file(path: str, ruleset: RuleSet, max_bytes: int, fix: str | None = None,
              cache: ResultCache | None = None) -> FileResult:
    """`fix`: None to lint only, "safe" or "unsafe" to compute the fixed text as well. A cache is
    read and written only when linting: fixing always starts from the file itself."""
    data = read_bytes(path, max_bytes)
    if isinstance(data, Unreadable):
        return FileResult(path, [_finding(path, UNREADABLE, 1, 1, data.reason)])
    if cache is not None and fix is None:
        cached = cache.get(data, ruleset.key(max_bytes), path)
        if cached is not None:
            return FileResult(path, cached, cached=True)
    source = decode_source(data, max_bytes)
    if isinstance(source, Unreadable):
        return FileResult(path, [_finding(path, UNREADABLE, 1, 1, source.reason)])
    if fix is not None:
        return fix_source(source, path, ruleset, unsafe=fix == "unsafe")
    result = lint_source(source, path, ruleset)
    if cache is not None and result.internal_error is None:
        cache.put(data, ruleset.key(max_bytes), result.findings)
    return result


# ----- many files -------------------------------------------------------------------------

_worker_rulesets: dict[frozenset[str], RuleSet] = {}
_worker_base: RuleSet | None = None
_worker_max_bytes = 0
_worker_fix: str | None = None
_worker_cache: ResultCache | None = None
_worker_count = 0


def _init_worker(ruleset: RuleSet, max_bytes: int, fix: str | None = None, cache: ResultCache | None = None) -> None:
    global _worker_base, _worker_max_bytes, _worker_fix, _worker_cache
    _worker_base, _worker_max_bytes, _worker_fix, _worker_cache = ruleset, max_bytes, fix, cache
    _worker_rulesets.clear()
    # libcst trees are large and acyclic: the automatic collector only costs time here
    # (parse of torch's sources: 50 s with it, 40 s without, measured); collect every few files.
    gc.disable()


def _lint_in_worker(job: tuple[str, frozenset[str]]) -> FileResult:
    global _worker_count
    path, ignored = job
    assert _worker_base is not None
    ruleset = _worker_rulesets.get(ignored)
    if ruleset is None:
        ruleset = _worker_rulesets[ignored] = _worker_base.without(ignored)
    _worker_count += 1
    if _worker_count % 32 == 0:
        gc.collect()
    return lint_file(path, ruleset, _worker_max_bytes, _worker_fix, _worker_cache)


def lint_files(
    jobs_list: Sequence[tuple[str, frozenset[str]]],
    ruleset: RuleSet,
    max_bytes: int,
    jobs: int | None = None,
    fix: str | None = None,
    cache: ResultCache | None = None,
) -> Iterable[FileResult]:
    """Lint (path, codes ignored for that path) pairs, in a process pool when it pays. Files the
    cache answers for are answered here, before any worker starts: a warm run reads and hashes
    each file once and parses none."""
    if cache is not None and fix is None:
        jobs_list = yield from _cache_hits(jobs_list, ruleset, max_bytes, cache)
    jobs = jobs or os.cpu_count() or 1
    if jobs <= 1 or len(jobs_list) < 8:
        _init_worker(ruleset, max_bytes, fix, cache)
        try:
            for job in jobs_list:
                yield _lint_in_worker(job)
        finally:
            gc.enable()
        return
    chunk = max(1, min(16, len(jobs_list) // (jobs * 4)))
    with ProcessPoolExecutor(max_workers=min(jobs, len(jobs_list)), initializer=_init_worker,
                             initargs=(ruleset, max_bytes, fix, cache)) as pool:
        futures = [pool.submit(_lint_chunk, jobs_list[i:i + chunk]) for i in range(0, len(jobs_list), chunk)]
        for start, future in zip(range(0, len(jobs_list), chunk), futures):
            try:
                yield from future.result()
            except BrokenProcessPool:
                for path, _ in jobs_list[start:start + chunk]:
                    yield FileResult(path, [_finding(
                        path, UNREADABLE, 1, 1,
                        "the worker checking this file (or one beside it) died; run with --jobs 1 to find which")])


def _cache_hits(jobs_list, ruleset: RuleSet, max_bytes: int, cache: ResultCache):
    """Yield the cached results; return the jobs still to run."""
    rulesets: dict[frozenset[str], RuleSet] = {}
    pending = []
    for path, ignored in jobs_list:
        data = read_bytes(path, max_bytes)
        if not isinstance(data, Unreadable):
            file_rules = rulesets.get(ignored) or rulesets.setdefault(ignored, ruleset.without(ignored))
            found = cache.get(data, file_rules.key(max_bytes), path)
            if found is not None:
                yield FileResult(path, found, cached=True)
                continue
        pending.append((path, ignored))
    return pending


def _lint_chunk(chunk: Sequence[tuple[str, frozenset[str]]]) -> list[FileResult]:
    return [_lint_in_worker(job) for job in chunk]
