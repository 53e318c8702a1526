"""Which files a run checks: the paths given, minus excludes and .gitignore.

Excludes hold for paths named on the command line too (ruff's force-exclude), so a pre-commit
hook cannot push an excluded file in. A directory that cannot be listed is not skipped in silence:
it goes into `Discovery.unreadable`, which the command line reports (exit 2).
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from gradlint.config import Settings

PYTHON_SUFFIXES = (".py", ".pyi")


@dataclass
class _GitIgnore:
    base: Path
    rules: list[tuple[re.Pattern[str], bool, bool]] = field(default_factory=list)  # pattern, negated, dir_only


def _gitignore_regex(pattern: str) -> str:
    anchored = "/" in pattern.rstrip("/")
    pattern = pattern.strip("/")
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i)
            if end == -1:
                out.append(re.escape("["))
                i += 1
            else:
                out.append(pattern[i:end + 1])
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    body = "".join(out)
    return f"^{body}$" if anchored else f"^(?:.*/)?{body}$"


def _read_gitignore(directory: Path) -> _GitIgnore | None:
    path = directory / ".gitignore"
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    ignore = _GitIgnore(directory)
    for line in lines:
        line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        dir_only = line.endswith("/")
        try:
            ignore.rules.append((re.compile(_gitignore_regex(line)), negated, dir_only))
        except re.error:
            continue
    return ignore


def _absolute(path: Path) -> Path:
    """Absolute without following symlinks: resolving a symlink loop raises."""
    return Path(os.path.abspath(path))


class Discovery:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.patterns = tuple(settings.exclude) + tuple(settings.extend_exclude)
        self._gitignores: dict[Path, _GitIgnore | None] = {}
        # (directory, reason) for each directory `files` could not list, in the order met.
        self.unreadable: list[tuple[str, str]] = []

    def _cannot_list(self, error: OSError) -> None:
        directory = error.filename if error.filename is not None else "?"
        self.unreadable.append((str(Path(os.fsdecode(directory))), error.strerror or str(error)))

    def relative(self, path: Path) -> str:
        try:
            return _absolute(path).relative_to(self.settings.root).as_posix()
        except ValueError:
            return path.as_posix()

    def excluded(self, path: Path, is_dir: bool, given: Path | None = None) -> bool:
        """Whether exclude patterns or .gitignore drop `path`. Patterns match the path relative
        to the project root; for a path outside the project (`gradlint check /opt/lib/torch`)
        only the part below the path the user gave counts, so naming a directory inside a
        virtualenv on purpose still checks it."""
        absolute = _absolute(path)
        try:
            relative = absolute.relative_to(self.settings.root).as_posix()
        except ValueError:
            if given is None:
                return False
            try:
                relative = absolute.relative_to(_absolute(given)).as_posix()
            except ValueError:
                return False
            if relative == ".":
                return False
        parts = relative.split("/")
        for pattern in self.patterns:
            if "/" in pattern.rstrip("/"):
                if fnmatch.fnmatch(relative, pattern.strip("/")) or fnmatch.fnmatch(relative, pattern.strip("/") + "/*"):
                    return True
            elif any(fnmatch.fnmatch(part, pattern.rstrip("/")) for part in parts):
                return True
        return self.settings.respect_gitignore and self._gitignored(path, is_dir)

    def _gitignored(self, path: Path, is_dir: bool) -> bool:
        absolute = _absolute(path)
        root = self.settings.root
        try:
            absolute.relative_to(root)
        except ValueError:
            return False
        # Later (deeper) .gitignore files and later lines win, as in git.
        ignored = False
        chain = [root] + [root / Path(*absolute.relative_to(root).parts[:i])
                          for i in range(1, len(absolute.relative_to(root).parts))]
        for directory in chain:
            if directory not in self._gitignores:
                self._gitignores[directory] = _read_gitignore(directory)
            ignore = self._gitignores[directory]
            if ignore is None:
                continue
            relative = absolute.relative_to(directory).as_posix()
            segments = relative.split("/")
            for pattern, negated, dir_only in ignore.rules:
                # A pattern matching a parent directory ignores everything below it.
                for depth in range(1, len(segments) + 1):
                    prefix = "/".join(segments[:depth])
                    prefix_is_dir = depth < len(segments) or is_dir
                    if dir_only and not prefix_is_dir:
                        continue
                    if pattern.match(prefix):
                        ignored = not negated
        return ignored

    def files(self, paths: list[Path]) -> Iterator[Path]:
        seen: set[Path] = set()
        for path in paths:
            if path.is_dir():
                if self.excluded(path, True, path) and _absolute(path) != self.settings.root:
                    continue
                for directory, dirnames, filenames in os.walk(path, onerror=self._cannot_list):
                    here = Path(directory)
                    dirnames[:] = sorted(d for d in dirnames if not self.excluded(here / d, True, path))
                    for filename in sorted(filenames):
                        candidate = here / filename
                        if filename.endswith(PYTHON_SUFFIXES) and not self.excluded(candidate, False, path):
                            if candidate not in seen:
                                seen.add(candidate)
                                yield candidate
            elif not self.excluded(path, False, path) and path not in seen:
                seen.add(path)
                yield path
