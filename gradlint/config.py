"""`[tool.gradlint]` in the nearest pyproject.toml, merged with the command line."""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from gradlint.findings import Severity
from gradlint.source import DEFAULT_MAX_BYTES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# ruff's default excludes, so a project's virtualenv and build output are never linted.
DEFAULT_EXCLUDES = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache",
    ".nox", ".pants.d", ".pyenv", ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox",
    ".venv", ".vscode", "__pypackages__", "_build", "buck-out", "build", "dist", "node_modules",
    "site-packages", "venv", ".gradlint_cache",
)


class ConfigError(Exception):
    """A bad configuration or selector: reported as one line, exit code 2."""


@dataclass
class Settings:
    root: Path = field(default_factory=Path.cwd)
    config_file: Path | None = None
    select: tuple[str, ...] | None = None  # None: every rule that is on by default
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES
    extend_exclude: tuple[str, ...] = ()
    per_file_ignores: dict[str, tuple[str, ...]] = field(default_factory=dict)
    severity: dict[str, Severity] = field(default_factory=dict)
    respect_gitignore: bool = True
    max_file_size: int = DEFAULT_MAX_BYTES
    cache_dir: Path | None = None  # None: GRADLINT_CACHE_DIR, else .gradlint_cache beside the config

    def resolved_cache_dir(self) -> Path:
        if self.cache_dir is not None:
            return self.cache_dir
        from_env = os.environ.get("GRADLINT_CACHE_DIR")
        return Path(from_env) if from_env else self.root / ".gradlint_cache"

    def enabled_codes(self, all_codes: Sequence[str], default_codes: Sequence[str]) -> frozenset[str]:
        chosen = set(_expand(self.select, all_codes) if self.select is not None else default_codes)
        chosen |= _expand(self.extend_select, all_codes)
        chosen -= _expand(self.ignore, all_codes)
        return frozenset(chosen)

    def ignored_for(self, relative_path: str, all_codes: Sequence[str]) -> frozenset[str]:
        ignored: set[str] = set()
        name = os.path.basename(relative_path)
        for pattern, selectors in self.per_file_ignores.items():
            if fnmatch.fnmatch(relative_path, pattern) or fnmatch.fnmatch(name, pattern):
                ignored |= _expand(selectors, all_codes)
        return frozenset(ignored)

    def check_selectors(self, all_codes: Sequence[str]) -> None:
        selectors = [*(self.select or ()), *self.extend_select, *self.ignore, *self.severity]
        for patterns in self.per_file_ignores.values():
            selectors.extend(patterns)
        for selector in selectors:
            if not _expand((selector,), all_codes):
                raise ConfigError(f"unknown rule selector {selector!r} (see `gradlint rules`)")


def _expand(selectors: Iterable[str], all_codes: Sequence[str]) -> set[str]:
    """ruff-style selectors: a full code, a prefix (`GL1`), or ALL."""
    chosen: set[str] = set()
    for selector in selectors:
        selector = selector.strip().upper()
        if selector == "ALL":
            chosen.update(all_codes)
        else:
            chosen.update(c for c in all_codes if c.startswith(selector))
    return chosen


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.gradlint] table, walking up from `start`."""
    start = Path(os.path.abspath(start))
    for directory in [start, *start.parents] if start.is_dir() else start.parents:
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
                raise ConfigError(f"{candidate}: cannot read: {error}") from None
            if "gradlint" in data.get("tool", {}):
                return candidate
    return None


_KEYS = {"select", "extend-select", "ignore", "exclude", "extend-exclude", "per-file-ignores",
         "severity", "respect-gitignore", "max-file-size", "cache-dir"}


def load_settings(config_file: Path | None, root: Path | None = None) -> Settings:
    if config_file is None:
        return Settings(root=(root or Path.cwd()).resolve())
    try:
        table = tomllib.loads(config_file.read_text(encoding="utf-8")).get("tool", {}).get("gradlint", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{config_file}: cannot read: {error}") from None
    unknown = set(table) - _KEYS
    if unknown:
        raise ConfigError(f"{config_file}: unknown key(s) in [tool.gradlint]: {', '.join(sorted(unknown))}")
    settings = Settings(root=config_file.parent.resolve(), config_file=config_file)
    try:
        if "select" in table:
            settings.select = _strings(table["select"], "select")
        settings.extend_select = _strings(table.get("extend-select", []), "extend-select")
        settings.ignore = _strings(table.get("ignore", []), "ignore")
        if "exclude" in table:
            settings.exclude = _strings(table["exclude"], "exclude")
        settings.extend_exclude = _strings(table.get("extend-exclude", []), "extend-exclude")
        settings.per_file_ignores = {
            str(k): _strings(v, f"per-file-ignores.{k}") for k, v in dict(table.get("per-file-ignores", {})).items()}
        settings.severity = {str(k).upper(): Severity.parse(str(v)) for k, v in dict(table.get("severity", {})).items()}
        settings.respect_gitignore = bool(table.get("respect-gitignore", True))
        settings.max_file_size = int(table.get("max-file-size", DEFAULT_MAX_BYTES))
        if "cache-dir" in table:
            if not isinstance(table["cache-dir"], str):
                raise TypeError("cache-dir must be a string")
            settings.cache_dir = settings.root / table["cache-dir"]
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{config_file}: [tool.gradlint]: {error}") from None
    return settings


def _strings(value, key: str) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{key} must be a list of strings")
    return tuple(value)
