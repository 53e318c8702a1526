"""`gradlint check` as a function: resolve settings, discover files, lint, collect."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from gradlint.config import ConfigError, Settings, find_config, load_settings
from gradlint.discover import Discovery
from gradlint.engine import RuleSet, lint_bytes, lint_files
from gradlint.findings import Finding
from gradlint.registry import all_rules


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


@dataclass
class CheckOutcome:
    findings: list[Finding]
    files_checked: int
    internal_errors: list[tuple[str, str]]


def resolve_settings(request: CheckRequest) -> Settings:
    if request.isolated:
        settings = Settings(root=Path.cwd().resolve())
    else:
        config = request.config_file
        if config is not None and not config.is_file():
            raise ConfigError(f"config file does not exist: {config}")
        if config is None:
            start = Path(request.stdin_filename).parent if request.stdin is not None and request.stdin_filename \
                else (request.paths[0] if request.stdin is None else Path("."))
            config = find_config(start if start.exists() else Path("."))
        settings = load_settings(config)
    if request.select is not None:
        settings.select = request.select
    settings.extend_select = settings.extend_select + request.extend_select
    settings.ignore = settings.ignore + request.ignore
    settings.check_selectors([r.code for r in all_rules()])
    return settings


def run_check(request: CheckRequest) -> CheckOutcome:
    settings = resolve_settings(request)
    ruleset = RuleSet.from_settings(settings)
    codes = [r.code for r in all_rules()]
    discovery = Discovery(settings)

    if request.stdin is not None:
        name = request.stdin_filename or "-"
        if request.stdin_filename and discovery.excluded(Path(name), False):
            return CheckOutcome([], 0, [])
        ignored = settings.ignored_for(discovery.relative(Path(name)), codes)
        result = lint_bytes(request.stdin.read(), name, ruleset.without(ignored), settings.max_file_size)
        errors = [(name, result.internal_error)] if result.internal_error else []
        return CheckOutcome(result.findings, 1, errors)

    missing = [p for p in request.paths if not p.exists() and not p.is_symlink()]
    if missing:
        raise ConfigError(f"path does not exist: {missing[0]}")
    jobs = [(str(path), settings.ignored_for(discovery.relative(path), codes))
            for path in discovery.files(request.paths)]
    findings: list[Finding] = []
    errors: list[tuple[str, str]] = []
    for result in lint_files(jobs, ruleset, settings.max_file_size, request.jobs):
        findings.extend(result.findings)
        if result.internal_error:
            errors.append((result.path, result.internal_error))
    findings.sort()
    return CheckOutcome(findings, len(jobs), errors)
