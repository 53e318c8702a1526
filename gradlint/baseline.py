"""A baseline: the findings a project already had, so that only new ones are reported.

`gradlint check --baseline FILE` writes FILE when it does not exist (every current finding, exit
0), and afterwards reports only the findings FILE does not hold. A finding is matched by its code,
its file and a fingerprint of the code around it, never by its line number, so lines added or
removed above it leave it matched; a finding that is fixed simply matches nothing any more.

Each entry holds two hashes: `fingerprint`, of the finding's own source line, and `context`, of
that line with the nearest non-blank line above and below it, each with its whitespace collapsed
(re-indenting is not a change). Findings are matched first on code, path and both hashes, then
what is left on code, path and `fingerprint` alone: so an edit beside a finding does not bring it
back, and of two identical lines in one file the right one is matched. Matching counts: a file
with two baselined `ctx.out = out` findings and a third copy reports the third. The message is
not part of any of it: rewording a rule's message must not resurrect a project's findings.

The file is JSON, sorted so that it diffs well under version control:

    {
      "gradlint-baseline": 1,
      "findings": [
        {"code": "GL101", "path": "ops/knn.py", "fingerprint": "5d0c1e2f9a7b3c44",
         "context": "0b9e5a1d7c2f8e61", "line": 22, "message": "..."}
      ]
    }

`gradlint-baseline` is the format's version. `path` is relative to the directory holding the
baseline file, with `/` separators. `line` and `message` are for the person reading the file;
matching ignores them.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from gradlint.config import ConfigError
from gradlint.findings import Finding
from gradlint.source import split_lines

VERSION = 1
VERSION_KEY = "gradlint-baseline"
_FINGERPRINT_HEX = 16


class BaselineError(ConfigError):
    """A baseline file that cannot be read or written, or is not one: one line, exit 2."""


@dataclass(frozen=True, order=True)
class Entry:
    code: str
    path: str
    fingerprint: str  # the finding's line
    context: str  # the line and its neighbours

    @property
    def loose(self) -> tuple[str, str, str]:
        return self.code, self.path, self.fingerprint

    def record(self, finding: Finding) -> dict:
        return {"code": self.code, "path": self.path, "fingerprint": self.fingerprint,
                "context": self.context, "line": finding.line, "message": finding.message}


def _normal(line: str) -> str:
    return " ".join(line.split())


def _hash(*parts: str) -> str:
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:_FINGERPRINT_HEX]


def hashes(lines: Sequence[str] | None, line: int) -> tuple[str, str]:
    """(fingerprint, context) of a finding on `line`."""
    if lines is None or not 1 <= line <= len(lines):
        own, above, below = "", "", ""  # an unreadable file: its code and path are all there is
    else:
        own = _normal(lines[line - 1])
        above = next((_normal(lines[i]) for i in range(line - 2, -1, -1) if lines[i].strip()), "")
        below = next((_normal(lines[i]) for i in range(line, len(lines)) if lines[i].strip()), "")
    return _hash(own), _hash(above, own, below)


def baseline_path(path: str, directory: Path) -> str:
    """A finding's path as the baseline stores it: relative to the baseline's directory."""
    if path == "-":
        return path
    absolute = os.path.abspath(path)
    try:
        relative = os.path.relpath(absolute, os.path.abspath(directory))
    except ValueError:  # another drive (Windows): keep it absolute
        relative = absolute
    return Path(relative).as_posix()


def entries(findings: Iterable[Finding], directory: Path,
            lines_of: Callable[[str], Sequence[str] | None]) -> list[tuple[Entry, Finding]]:
    """Each finding with its baseline entry. `lines_of(path)` gives a file's lines (None when it
    cannot be read); it is asked once per file."""
    cache: dict[str, Sequence[str] | None] = {}
    paired = []
    for finding in sorted(findings):
        if finding.path not in cache:
            cache[finding.path] = lines_of(finding.path)
        fingerprint, context = hashes(cache[finding.path], finding.line)
        paired.append((Entry(finding.code, baseline_path(finding.path, directory), fingerprint, context), finding))
    return paired


@dataclass
class Baseline:
    path: Path
    known: Counter[Entry]

    @property
    def directory(self) -> Path:
        return self.path.parent

    def split(self, findings: Sequence[Finding], lines_of: Callable[[str], Sequence[str] | None]
              ) -> tuple[list[Finding], int, int]:
        """(the findings not in the baseline, how many it hid, how many of its entries matched
        nothing: fixed, or moved into other code)."""
        paired = entries(findings, self.directory, lines_of)
        exact = Counter(self.known)
        pending = []
        for entry, finding in paired:
            if exact[entry]:
                exact[entry] -= 1
            else:
                pending.append((entry, finding))
        # What the exact pass left, by the finding's own line alone: an edit beside it changed
        # its context, not it.
        loose = Counter(entry.loose for entry in exact.elements())
        new = []
        for entry, finding in pending:
            if loose[entry.loose]:
                loose[entry.loose] -= 1
            else:
                new.append(finding)
        return sorted(new), len(paired) - len(new), sum(loose.values())


def load(path: Path) -> Baseline:
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise BaselineError(f"baseline {path} is a directory, not a baseline file") from None
    except OSError as error:
        raise BaselineError(f"cannot read baseline {path}: {error.strerror or error}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise BaselineError(f"baseline {path} is not UTF-8 (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise BaselineError(f"baseline {path} is not JSON: {error.msg} (line {error.lineno}, "
                            f"column {error.colno}); delete it to write a new one") from None
    if not isinstance(data, dict) or VERSION_KEY not in data:
        raise BaselineError(f"baseline {path} is not a gradlint baseline (no \"{VERSION_KEY}\" key)")
    if data[VERSION_KEY] != VERSION or isinstance(data[VERSION_KEY], bool):
        raise BaselineError(f"baseline {path} has format version {json.dumps(data[VERSION_KEY])[:40]}; this gradlint "
                            f"reads version {VERSION}")
    records = data.get("findings")
    if not isinstance(records, list):
        raise BaselineError(f"baseline {path}: \"findings\" must be a list")
    known: Counter[Entry] = Counter()
    for index, record in enumerate(records):
        known[_entry(record, f"baseline {path}: findings[{index}]")] += 1
    return Baseline(path, known)


def _entry(record: object, where: str) -> Entry:
    if not isinstance(record, dict):
        raise BaselineError(f"{where} must be an object")
    for key in ("code", "path", "fingerprint", "context"):
        if not isinstance(record.get(key), str) or not record[key]:
            raise BaselineError(f"{where} needs \"{key}\" as a non-empty string")
    return Entry(record["code"], record["path"], record["fingerprint"], record["context"])


def write(path: Path, findings: Sequence[Finding], lines_of: Callable[[str], Sequence[str] | None]) -> int:
    """Write a baseline of `findings` atomically (a temporary file beside it, then a rename);
    returns how many entries it holds."""
    paired = entries(findings, path.parent, lines_of)
    document = {VERSION_KEY: VERSION,
                "findings": [entry.record(finding) for entry, finding in sorted(paired, key=lambda p: p[0])]}
    # ASCII with escapes: a file name that is not UTF-8 (a surrogate here) round-trips through \udcXX.
    payload = json.dumps(document, indent=2) + "\n"
    directory = path.parent if str(path.parent) else Path(".")
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as error:
        raise BaselineError(f"cannot write baseline {path}: {error.strerror or error}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(payload)
        # mkstemp makes the file 0600; a baseline is committed and shared, so it gets what any
        # new file would (0644 under the usual umask).
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except OSError as error:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise BaselineError(f"cannot write baseline {path}: {error.strerror or error}") from None
    return len(paired)


def _umask() -> int:
    # Reading the umask means setting it; the CLI runs this with no other thread of its own.
    current = os.umask(0)
    os.umask(current)
    return current


def lines_reader(sources: Mapping[str, str]) -> Callable[[str], list[str] | None]:
    """A file's lines as they are now, or from `sources` (stdin's text) for what is not a file."""
    from gradlint.source import read_source

    def lines_of(path: str) -> list[str] | None:
        if path in sources:
            return split_lines(sources[path])
        text = read_source(path, max_bytes=1 << 62)
        return split_lines(text) if isinstance(text, str) else None

    return lines_of
