"""`[tool.gradlint]` in the nearest pyproject.toml, merged with the command line."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from gradlint.cache import user_cache_dir
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


# The largest max-file-size: libcst needs about 1 GB for a 1 MiB file (28k lines, measured), so a
# 256 MiB file would need hundreds of GB; and a limit near 2**63 overflows the reads it sizes.
MAX_FILE_SIZE_LIMIT = 256 * 1024 * 1024


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
    cache_dir: Path | None = None  # `cache-dir` from pyproject.toml: inside the project or the user cache
    cache_dir_override: Path | None = None  # from the command line: anywhere

    def resolved_cache_dir(self) -> Path:
        """The command line's choice, else $GRADLINT_CACHE_DIR, else `cache-dir`, else
        .gradlint_cache beside the config. The first two are the user's and may be anywhere (as
        ruff's --cache-dir and RUFF_CACHE_DIR override its config file). The last two come with
        the project, so they must stay inside it (not be the project folder itself) or inside
        the user's gradlint cache folder; checked here again, with symlinks resolved, because a
        checked-in `.gradlint_cache` symlink could point anywhere."""
        if self.cache_dir_override is not None:
            return self.cache_dir_override
        from_env = os.environ.get("GRADLINT_CACHE_DIR")
        if from_env:
            return Path(from_env)
        chosen = self.cache_dir if self.cache_dir is not None else self.root / ".gradlint_cache"
        problem = project_cache_dir_problem(chosen, self.root)
        if problem is not None:
            where = f"{self.config_file}: [tool.gradlint]: cache-dir" if self.cache_dir is not None \
                else "the cache folder"
            raise ConfigError(f"{where} {problem}; set GRADLINT_CACHE_DIR to put the cache elsewhere, "
                              "or pass --no-cache")
        return chosen

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


def project_cache_dir_problem(path: Path, root: Path, shown: str | None = None) -> str | None:
    """Why a cache directory that came with the project may not be used, or None: it must be
    below the project folder (not the folder itself, nor above it) or in the user's gradlint
    cache folder, once symlinks are resolved."""
    shown = repr(str(path) if shown is None else shown)
    real = os.path.normcase(os.path.realpath(path))
    project = os.path.normcase(os.path.realpath(root))
    if real == project:
        return f"{shown} is the project folder itself; name a folder inside it (the default is '.gradlint_cache')"
    if _below(real, project):
        return None
    user = user_cache_dir()
    if user is not None:
        user_real = os.path.normcase(os.path.realpath(user))
        if real == user_real or _below(real, user_real):
            return None
    allowed = f"the project ({root})" + (f" or the user cache folder ({user})" if user is not None else "")
    resolved = f" (resolves to {os.path.realpath(path)})" if os.path.realpath(path) != os.path.abspath(path) else ""
    return f"{shown}{resolved} is not inside {allowed}"


def _below(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder and path != folder
    except ValueError:  # different drives on Windows
        return False


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.gradlint] table, walking up from `start`."""
    start = Path(os.path.abspath(start))
    for directory in [start, *start.parents] if start.is_dir() else start.parents:
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            if _gradlint_table(candidate) is not None:
                return candidate
    return None


_KEYS = {"select", "extend-select", "ignore", "exclude", "extend-exclude", "per-file-ignores",
         "severity", "respect-gitignore", "max-file-size", "cache-dir"}


def _gradlint_table(config_file: Path) -> dict | None:
    """[tool.gradlint] of the file, None if it has none; ConfigError if the file cannot be read or
    `tool` or `tool.gradlint` is not a table."""
    try:
        data = tomllib.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # TOMLDecodeError, UnicodeDecodeError, an int of 5000 digits
        raise ConfigError(f"{config_file}: cannot read: {error}") from None
    except RecursionError:
        raise ConfigError(f"{config_file}: cannot read: nested too deeply") from None
    tool = data.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise ConfigError(f"{config_file}: `tool` must be a table, got {_describe(tool)}")
    table = tool.get("gradlint")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{config_file}: [tool.gradlint] must be a table, got {_describe(table)}")
    return table


def load_settings(config_file: Path | None, root: Path | None = None) -> Settings:
    """Every value is checked for its type and range here: a bad one is a ConfigError naming the
    file, the key and what is expected (one line on stderr, exit 2), never a traceback later."""
    if config_file is None:
        return Settings(root=(root or Path.cwd()).resolve())
    table = _gradlint_table(config_file) or {}
    unknown = set(table) - _KEYS
    if unknown:
        raise ConfigError(f"{config_file}: unknown key(s) in [tool.gradlint]: {', '.join(map(_key, sorted(unknown)))}")
    settings = Settings(root=config_file.parent.resolve(), config_file=config_file)
    try:
        if "select" in table:
            settings.select = _selectors(table["select"], "select")
        settings.extend_select = _selectors(table.get("extend-select", []), "extend-select")
        settings.ignore = _selectors(table.get("ignore", []), "ignore")
        if "exclude" in table:
            settings.exclude = _strings(table["exclude"], "exclude")
        settings.extend_exclude = _strings(table.get("extend-exclude", []), "extend-exclude")
        settings.per_file_ignores = {
            _nonempty(pattern, "a per-file-ignores key", "a file pattern"): _selectors(codes, f"per-file-ignores.{_key(pattern)}")
            for pattern, codes in _table(table.get("per-file-ignores", {}), "per-file-ignores").items()}
        settings.severity = {
            _nonempty(code, "a severity key", "a rule code or prefix").strip().upper(): _severity(value, f"severity.{_key(code)}")
            for code, value in _table(table.get("severity", {}), "severity").items()}
        if "respect-gitignore" in table:
            if type(table["respect-gitignore"]) is not bool:
                raise _Bad(f"respect-gitignore must be true or false, got {_describe(table['respect-gitignore'])}")
            settings.respect_gitignore = table["respect-gitignore"]
        if "max-file-size" in table:
            settings.max_file_size = _file_size(table["max-file-size"])
        if "cache-dir" in table:
            settings.cache_dir = _cache_dir(table["cache-dir"], settings.root)
    except _Bad as error:
        raise ConfigError(f"{config_file}: [tool.gradlint]: {error}") from None
    return settings


def _key(name: str) -> str:
    """A key as TOML would write it: bare, or quoted (so a newline in one stays on the line)."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


class _Bad(ValueError):
    """A value of the wrong type or out of range; the message names the key."""


_TOML_TYPES = ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"), (list, "array"),
               (dict, "table"))


def _describe(value: object) -> str:
    """The TOML type of a value, with the value when it is short: `integer 3`, `float inf`."""
    for kind, name in _TOML_TYPES:
        if isinstance(value, kind):
            break
    else:
        name = type(value).__name__  # a date, time or datetime
    if isinstance(value, (bool, int, float)):
        text = str(value).lower() if isinstance(value, bool) else repr(value)
        return f"{name} {text if len(text) <= 24 else text[:20] + '...'}"
    if isinstance(value, str):
        return f"string {value!r}" if len(value) <= 40 else "a string"
    return name


def _strings(value: object, key: str, item: str = "a pattern") -> tuple[str, ...]:
    if type(value) is not list:
        raise _Bad(f"{key} must be a list of strings, got {_describe(value)}")
    for index, entry in enumerate(value):
        if not isinstance(entry, str):
            raise _Bad(f"{key} must be a list of strings, got {_describe(entry)} at {key}[{index}]")
        _nonempty(entry, f"{key}[{index}]", item)
    return tuple(value)


def _selectors(value: object, key: str) -> tuple[str, ...]:
    # An empty selector would be a prefix of every code: `ignore = [""]` would turn every rule off.
    return _strings(value, key, "a rule code or prefix (see `gradlint rules`)")


def _nonempty(text: str, what: str, expected: str) -> str:
    if not text.strip():
        raise _Bad(f"{what} must be {expected}, got {_describe(text)}")
    if "\0" in text:
        raise _Bad(f"{what} must be {expected}, got a string with a NUL character")
    return text


def _table(value: object, key: str) -> dict:
    if not isinstance(value, dict):
        raise _Bad(f"{key} must be a table, got {_describe(value)}")
    return value


def _severity(value: object, key: str) -> Severity:
    if not isinstance(value, str):
        raise _Bad(f"{key} must be one of \"error\", \"warning\", \"note\", got {_describe(value)}")
    try:
        return Severity.parse(value)
    except ValueError:
        raise _Bad(f"{key} must be one of \"error\", \"warning\", \"note\", got {_describe(value)}") from None


def _file_size(value: object) -> int:
    if type(value) is not int or not 1 <= value <= MAX_FILE_SIZE_LIMIT:
        raise _Bad(f"max-file-size must be a whole number of bytes from 1 to {MAX_FILE_SIZE_LIMIT} (256 MiB), "
                   f"got {_describe(value)}")
    return value


def _cache_dir(value: object, root: Path) -> Path:
    if not isinstance(value, str):
        raise _Bad(f"cache-dir must be a string (a folder inside the project), got {_describe(value)}")
    if "\0" in value:
        raise _Bad(f"cache-dir must be a folder name, got {_describe(value)} with a NUL character")
    path = root / value
    problem = project_cache_dir_problem(path, root, value)
    if problem is not None:
        raise _Bad(f"cache-dir {problem}; set GRADLINT_CACHE_DIR to put the cache elsewhere")
    return path
