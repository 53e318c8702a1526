"""`gradlint check` as a function: resolve settings, discover files, lint, collect."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from gradlint import baseline as baselines
from gradlint.cache import ResultCache
from gradlint.config import ConfigError, Settings, find_config, load_settings
from gradlint.discover import Discovery
from gradlint.engine import RuleSet, fix_source, lint_bytes, lint_files, selectable_codes
from gradlint.findings import FileResult, Finding
from gradlint.noqa import add_noqa
from gradlint.registry import all_rules
from gradlint.source import Unreadable, decode_source, read_source, text_digest
from gradlint.writeback import NotWritten, Refused, refusal, resolved_roots, write_fixed


class InputError(ConfigError):
    """A path or stdin that cannot be read: reported like a usage error, one line, exit 2."""


@dataclass
class CheckRequest:
    paths: list[Path] = field(default_factory=lambda: [Path(".")])
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    jobs: int | None = None
    stdin_filename: str | None = None
    config_file: Path | None = None
    isolated: bool = False
    stdin: BinaryIO | None = None
    fix: bool = False  # write the fixes
    diff: bool = False  # compute the fixes, write nothing
    unsafe_fixes: bool = False
    no_cache: bool = False
    baseline: Path | None = None  # report only findings not in it; written when it does not exist
    add_noqa: bool = False  # write `# noqa: CODE` on each finding's line
    # Excludes drop files named in `paths` too (ruff's --force-exclude, so a pre-commit hook cannot
    # push an excluded file in); False checks every named file, as the probe's cross-check needs.
    exclude_named: bool = True

    @property
    def fix_mode(self) -> str | None:
        if not (self.fix or self.diff):
            return None
        return "unsafe" if self.unsafe_fixes else "safe"


@dataclass
class Change:
    """A file the fixes changed (or, with --diff, would change)."""

    path: str
    before: str
    after: str
    fixes: int


@dataclass
class CheckOutcome:
    findings: list[Finding]  # with --fix/--diff: those the fixes leave
    files_checked: int
    internal_errors: list[tuple[str, str]]
    changes: list[Change] = field(default_factory=list)
    not_written: list[tuple[str, str]] = field(default_factory=list)  # a write that failed (exit 2)
    not_fixed: list[tuple[str, str]] = field(default_factory=list)  # left alone on purpose (writeback's policy)
    unreadable_dirs: list[tuple[str, str]] = field(default_factory=list)  # met in discovery, not listed (exit 2)
    stdin_data: bytes = b""  # what was read from `-`
    warnings: list[str] = field(default_factory=list)
    files_cached: int = 0  # answered by the result cache
    baseline_written: int | None = None  # entries in the baseline this run wrote
    baseline_hidden: int = 0  # findings the baseline holds, not reported
    baseline_gone: int = 0  # baseline entries no finding matches any more (fixed)
    noqa_added: int = 0
    noqa_files: int = 0
    noqa_skipped: list[tuple[Finding, str]] = field(default_factory=list)

    @property
    def stdin_text(self) -> str | None:
        """The text the findings from `-` refer to (after --fix, the fixed text)."""
        if self.changes:
            return self.changes[0].after
        source = decode_source(self.stdin_data, max_bytes=1 << 62)
        return source if isinstance(source, str) else None

    @property
    def fixed(self) -> int:
        return sum(change.fixes for change in self.changes)


def resolve_settings(request: CheckRequest) -> Settings:
    if request.isolated:
        settings = Settings(root=Path.cwd().resolve())
    else:
        config = request.config_file
        if config is not None:
            try:
                is_file = config.is_file()
            except OSError as error:
                raise InputError(f"cannot read config file {config}: {error.strerror or error}") from None
            if not is_file:
                raise ConfigError(f"config file does not exist: {config}")
        if config is None:
            start = Path(request.stdin_filename).parent if request.stdin is not None and request.stdin_filename \
                else (request.paths[0] if request.stdin is None else Path("."))
            config = find_config(start if _exists(start) else Path("."))
        settings = load_settings(config)
    if request.select is not None:
        settings.select = request.select
    settings.extend_select = settings.extend_select + request.extend_select
    settings.ignore = settings.ignore + request.ignore
    settings.check_selectors(selectable_codes())
    return settings


def run_check(request: CheckRequest) -> CheckOutcome:
    settings = resolve_settings(request)
    ruleset = RuleSet.from_settings(settings)
    codes = selectable_codes()
    discovery = Discovery(settings)

    if request.stdin is not None:
        name = request.stdin_filename or "-"
        if request.stdin_filename and discovery.excluded(Path(name), False):
            return CheckOutcome([], 0, [])
        ignored = settings.ignored_for(discovery.relative(Path(name)), codes)
        try:
            data = request.stdin.read()
        except OSError as error:
            raise InputError(f"cannot read stdin: {error.strerror or error}") from None
        rules = ruleset.without(ignored)
        source = decode_source(data, settings.max_file_size)
        if request.fix_mode is None or isinstance(source, Unreadable):
            result = lint_bytes(data, name, rules, settings.max_file_size)
        else:
            result = fix_source(source, name, rules, unsafe=request.fix_mode == "unsafe")
        errors = [(name, result.internal_error)] if result.internal_error else []
        changes = [Change(name, source, result.fixed_source, result.fixes_applied)] \
            if result.fixed_source is not None else []
        outcome = CheckOutcome(result.findings, 1, errors, changes, stdin_data=data)
        _apply_baseline(request, outcome, {name: outcome.stdin_text} if outcome.stdin_text is not None else {})
        return outcome

    for path in request.paths:
        problem = _path_problem(path)
        if problem is not None:
            raise InputError(problem)
    jobs = [(str(path), settings.ignored_for(discovery.relative(path), codes))
            for path in discovery.files(request.paths, request.exclude_named)]
    outcome = CheckOutcome([], len(jobs), [], unreadable_dirs=list(discovery.unreadable))
    cache = None
    if not request.no_cache and request.fix_mode is None:
        cache = ResultCache(settings.resolved_cache_dir(), ResultCache.build_key())
        if cache.disabled_reason is not None:
            outcome.warnings.append(cache.disabled_reason)
            cache = None
    for result in lint_files(jobs, ruleset, settings.max_file_size, request.jobs, request.fix_mode, cache):
        outcome.files_cached += result.cached
        if result.fixed_source is not None and not _take_change(result, request, outcome):
            outcome.findings.extend(result.unfixed_findings)
        else:
            outcome.findings.extend(result.findings)
        if result.internal_error:
            outcome.internal_errors.append((result.path, result.internal_error))
    outcome.findings.sort()
    _apply_baseline(request, outcome, {})
    if request.add_noqa:
        _add_noqa(request, outcome)
    return outcome


def _apply_baseline(request: CheckRequest, outcome: CheckOutcome, sources: dict[str, str]) -> None:
    """Write the baseline when there is none (then nothing is reported), else keep only the
    findings it does not hold. A baseline that cannot be read is a BaselineError (exit 2)."""
    if request.baseline is None:
        return
    lines_of = baselines.lines_reader(sources)
    if not _exists(request.baseline) and not request.baseline.is_symlink():
        outcome.baseline_written = baselines.write(request.baseline, outcome.findings, lines_of)
        outcome.baseline_hidden = len(outcome.findings)
        outcome.findings = []
        return
    known = baselines.load(request.baseline)
    outcome.findings, outcome.baseline_hidden, outcome.baseline_gone = known.split(outcome.findings, lines_of)


def _add_noqa(request: CheckRequest, outcome: CheckOutcome) -> None:
    """Write a `# noqa` for each finding into its file; what is silenced leaves the findings."""
    silenceable = frozenset(rule.code for rule in all_rules())
    roots = resolved_roots(request.paths)
    by_path: dict[str, list[Finding]] = {}
    for finding in outcome.findings:
        by_path.setdefault(finding.path, []).append(finding)
    left: list[Finding] = []
    for path, findings in by_path.items():
        source = read_source(path, max_bytes=1 << 62)
        if isinstance(source, Unreadable):
            outcome.noqa_skipped.extend((f, "the file cannot be read again") for f in findings
                                        if f.code in silenceable)
            left.extend(findings)
            continue
        result = add_noqa(source, findings, silenceable)
        outcome.noqa_skipped.extend((f, why) for f, why in result.skipped if f.code in silenceable)
        not_added = {id(f) for f, _ in result.skipped}
        if result.added:
            try:
                write_fixed(path, result.source, text_digest(source), roots)
            except Refused as error:
                outcome.not_fixed.append((path, str(error)))
                left.extend(findings)
                continue
            except NotWritten as error:
                outcome.not_written.append((path, str(error)))
                left.extend(findings)
                continue
            outcome.noqa_added += result.added
            outcome.noqa_files += 1
        left.extend(f for f in findings if id(f) in not_added)
    outcome.findings = sorted(left)


def _take_change(result: FileResult, request: CheckRequest, outcome: CheckOutcome) -> bool:
    """Write (or, for --diff, only record) one file's fixes. False when the file could not be
    written: nothing was fixed there, so its findings are those from before the fixes."""
    roots = resolved_roots(request.paths)
    try:
        if request.fix and not request.diff:
            before = write_fixed(result.path, result.fixed_source, result.source_digest, roots)
        else:
            # --diff shows what --fix would write, so it leaves out what --fix would refuse.
            reason = refusal(result.path, roots)
            if reason is not None:
                raise Refused(reason)
            before = _current_text(result.path, result.source_digest)
            if before is None:
                raise NotWritten("it changed while gradlint was checking it; run again")
    except Refused as error:
        outcome.not_fixed.append((result.path, str(error)))
        return False
    except NotWritten as error:
        outcome.not_written.append((result.path, str(error)))
        return False
    outcome.changes.append(Change(result.path, before, result.fixed_source, result.fixes_applied))
    return True


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # below a directory that cannot be searched: _path_problem reports it
        return False


def _path_problem(path: Path) -> str | None:
    """Why a path named on the command line cannot be checked, or None. A symlink loop or a
    dangling symlink is checked: it is reported as a GL001 finding at that path."""
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP or os.path.islink(path):
            return None
        if error.errno == errno.ENOENT:
            return f"path does not exist: {path}"
        return f"cannot check {path}: {error.strerror or error}"
    return None


def _current_text(path: str, digest: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            text = decode_source(handle.read(), max_bytes=1 << 62)
    except OSError:
        return None
    if isinstance(text, Unreadable) or text_digest(text) != digest:
        return None
    return text
