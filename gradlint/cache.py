"""Per-file results kept between runs: an unchanged file, checked by the same gradlint build under
the same settings, is not read into a parser again."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from gradlint import __version__
from gradlint.findings import Applicability, Edit, Finding, Fix, Severity

# Bump when the entry layout changes: a new format gets its own directory, and an entry carries
# the format too, so an entry copied from another build is a miss rather than a misread.
FORMAT = 1

# GL000 (syntax error) and GL001 (unreadable file) are engine.SYNTAX_ERROR / engine.UNREADABLE,
# spelled out because the engine imports this module. They depend on more than the file's bytes
# (the max file size, the Python that parsed it, a worker that died), so they are always re-checked.
UNCACHED_CODES = frozenset({"GL000", "GL001"})

CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by gradlint.\n"
    "# For information about cache directory tags, see https://bford.info/cachedir/\n"
)
GITIGNORE = "# Automatically created by gradlint.\n*\n"


class _Corrupt(ValueError):
    """An entry whose JSON parsed but whose shape is not one this build writes."""


class ResultCache:
    """Per-file results in <directory>, keyed by content, gradlint build and effective config."""

    def __init__(self, directory: Path, run_key: str):
        self.directory = Path(directory)
        self.entries = self.directory / f"{__version__}-format{FORMAT}"
        self.run_key = run_key
        self._entries_dir = str(self.entries)
        # The run key is the same for every file of a run: hash it once and copy the state.
        self._run_hash = hashlib.sha256(_framed(run_key))
        self.disabled_reason: str | None = self._prepare()

    @staticmethod
    def build_key(roots: Sequence[Path] | None = None) -> str:
        """This gradlint build: its version, the Python and libcst that parse for it, and a
        digest of its own source files, so an edited rule in a dev checkout misses old entries.

        Contents, not mtimes: a checkout or a `git stash pop` can keep sizes and restore mtimes, and
        reading all ~35 files (200 KB) costs about 1.5 ms, measured."""
        digest = hashlib.sha256()
        digest.update(_framed(__version__))
        digest.update(_framed(sys.version))
        digest.update(_libcst_version_source())
        for name, content in _source_files(roots if roots is not None else _package_roots()):
            digest.update(_framed(name))
            digest.update(hashlib.sha256(content).digest())
        return f"gradlint-{__version__}-{digest.hexdigest()[:32]}"

    def entry_path(self, data: bytes, file_key: str) -> Path:
        """Where the entry for this file's bytes under this run and rule set lives."""
        return Path(self._entry_file(data, file_key))

    def get(self, data: bytes, file_key: str, path: str) -> list[Finding] | None:
        """The findings stored for these bytes, placed at `path`; None on a miss, including an
        entry that is missing, unreadable, truncated, corrupt or from another format."""
        if self.disabled_reason is not None:
            return None
        try:
            with open(self._entry_file(data, file_key), "rb") as entry:
                raw = entry.read()
        except OSError:
            return None
        try:
            return _decode(raw, path)
        except (ValueError, TypeError, RecursionError):
            return None

    def put(self, data: bytes, file_key: str, findings: Sequence[Finding]) -> None:
        """Store the findings for these bytes; nothing when a finding is GL000/GL001."""
        if self.disabled_reason is not None:
            return
        if any(finding.code in UNCACHED_CODES for finding in findings):
            return
        payload = _encode(findings)
        target = self._entry_file(data, file_key)
        try:
            handle, temp = tempfile.mkstemp(prefix=".tmp-", dir=self._entries_dir)
        except OSError as error:  # the directory went away or the disk turned read-only mid-run
            self.disabled_reason = _reason(self.entries, error)
            return
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(payload)
            # Atomic on one filesystem: a concurrent reader sees the old entry or the whole new
            # one. Two writers of one key write the same bytes, so the last one winning is fine.
            os.replace(temp, target)
        except OSError:  # a full disk, or on Windows a reader holding the target open: skip this one
            try:
                os.unlink(temp)
            except OSError:
                pass

    def __getstate__(self) -> dict:
        # Sent to pool workers under spawn/forkserver; a hashlib object does not pickle.
        state = dict(self.__dict__)
        del state["_run_hash"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._run_hash = hashlib.sha256(_framed(self.run_key))

    def _entry_file(self, data: bytes, file_key: str) -> str:
        key = self._run_hash.copy()
        key.update(_framed(file_key))
        key.update(hashlib.sha256(data).digest())
        return os.path.join(self._entries_dir, key.hexdigest())

    def _prepare(self) -> str | None:
        """Create the layout on first use; the reason caching is off for this run, if it is."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", GITIGNORE)):
                marker = self.directory / name
                if not marker.exists():
                    _write_atomically(marker, text.encode("ascii"))
                    marker.chmod(0o644)  # mkstemp makes it 0600: others' git and backup tools read it too
            self.entries.mkdir(exist_ok=True)
            # An existing directory on a read-only mount (or, as non-root, without write permission)
            # passes everything above: only creating a file shows it.
            handle, probe = tempfile.mkstemp(prefix=".tmp-", dir=self._entries_dir)
            os.close(handle)
            os.unlink(probe)
        except OSError as error:
            return _reason(self.directory, error)
        return None


# ----- entries --------------------------------------------------------------------------------
# JSON of plain lists, not marshal: marshal.loads is faster (0.2-1.6 µs against json's 2-6 µs for 0-3
# findings, measured) but both vanish next to the ~15 µs of opening and reading the entry, and
# json.loads can build nothing but plain values from a corrupt file (marshal promises no such thing).


def _encode(findings: Iterable[Finding]) -> bytes:
    rows = [[f.line, f.column, f.code, f.message, f.name, f.severity.value, f.end_line, f.end_column,
             f.subject, _fix_row(f.fix)] for f in findings]
    # ensure_ascii (the default) escapes lone surrogates instead of failing to encode them.
    return json.dumps([FORMAT, rows], separators=(",", ":")).encode("ascii")


def _fix_row(fix: Fix | None) -> list | None:
    if fix is None:
        return None
    return [fix.message, fix.applicability.value,
            [[e.start, e.end, e.content, e.line, e.column, e.end_line, e.end_column] for e in fix.edits]]


def _decode(raw: bytes, path: str) -> list[Finding]:
    entry = json.loads(raw)
    if type(entry) is not list or len(entry) != 2 or entry[0] != FORMAT or type(entry[1]) is not list:
        raise _Corrupt("not an entry of this format")
    findings = []
    for row in entry[1]:
        if type(row) is not list or len(row) != 10:
            raise _Corrupt("not a finding")
        line, column, code, message, name, severity, end_line, end_column, subject, fix = row
        _require(int, line, column, end_line, end_column)
        _require(str, code, message, name, subject)
        findings.append(Finding(path=path, line=line, column=column, code=code, message=message, name=name,
                                severity=Severity(severity), end_line=end_line, end_column=end_column,
                                subject=subject, fix=None if fix is None else _decode_fix(fix)))
    return findings


def _decode_fix(row: object) -> Fix:
    if type(row) is not list or len(row) != 3 or type(row[2]) is not list:
        raise _Corrupt("not a fix")
    message, applicability, edit_rows = row
    _require(str, message)
    edits = []
    for edit in edit_rows:
        if type(edit) is not list or len(edit) != 7:
            raise _Corrupt("not an edit")
        start, end, content, line, column, end_line, end_column = edit
        _require(int, start, end, line, column, end_line, end_column)
        _require(str, content)
        edits.append(Edit(start, end, content, line, column, end_line, end_column))
    return Fix(message, Applicability(applicability), tuple(edits))


def _require(kind: type, *values: object) -> None:
    # `type() is`, not isinstance: JSON true/false would pass as int and compare as 1/0.
    for value in values:
        if type(value) is not kind:
            raise _Corrupt(f"expected {kind.__name__}, got {type(value).__name__}")


# ----- helpers --------------------------------------------------------------------------------


def _framed(text: str) -> bytes:
    """Length-prefixed, so ("ab", "c") and ("a", "bc") hash differently."""
    data = text.encode("utf-8", "surrogatepass")
    return len(data).to_bytes(8, "little") + data


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def _reason(where: Path, error: OSError) -> str:
    return f"cannot write the cache at {where} ({error.strerror or error}); running without it"


def _package_roots() -> list[Path]:
    """The directories whose code decides findings. In a dev (editable) install the rules live in
    the top-level rules/ folder, outside gradlint/, so each package is found on its own."""
    roots: list[Path] = []
    for package in ("gradlint", "gradlint.rules"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            roots.extend(Path(location) for location in spec.submodule_search_locations)
    return roots


def _source_files(roots: Sequence[Path]) -> list[tuple[str, bytes]]:
    """(name, content) of every .py file under the roots, in a stable order. A root inside another
    (a wheel puts rules/ under gradlint/) is walked once."""
    resolved = sorted({Path(root).resolve() for root in roots})
    walked: list[Path] = []
    files: list[tuple[str, bytes]] = []
    for index, root in enumerate(resolved):
        if any(root.is_relative_to(done) for done in walked):
            continue
        walked.append(root)
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__" and not d.startswith("."))
            for name in sorted(names):
                if not name.endswith(".py"):
                    continue
                full = os.path.join(folder, name)
                relative = f"{index}/{os.path.relpath(full, root)}"
                try:
                    with open(full, "rb") as source:
                        files.append((relative, source.read()))
                except OSError as error:  # still a key, and one that differs once it is readable
                    files.append((relative, f"unreadable: {error.strerror}".encode()))
    return files


def _libcst_version_source() -> bytes:
    """libcst's generated _version.py, read rather than imported: a fully cached run need never
    import libcst (~100 ms), and its parse trees decide where findings land."""
    try:
        spec = importlib.util.find_spec("libcst")
    except (ImportError, ValueError):
        return b"libcst: not found"
    if spec is None or not spec.submodule_search_locations:
        return b"libcst: not found"
    for location in spec.submodule_search_locations:
        try:
            with open(os.path.join(location, "_version.py"), "rb") as version:
                return version.read()
        except OSError:
            continue
    return b"libcst: no _version.py"
