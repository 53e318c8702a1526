"""Per-file results kept between runs: an unchanged file, checked by the same gradlint build under
the same settings, is not read into a parser again.

Trust: a cache directory can come from somewhere else (copied with a checkout, restored from an
archive, checked into a repository), and an entry saying "no findings" would hide real ones. So
every entry is bound to a secret key that lives outside any project, in the user's cache folder
(`cache-key`, created 0600 on first use): an entry's name is a MAC of what it is for, and its
content carries a MAC of that name and its payload. An entry made under another key (another
user, another machine, a forger without the key) is never found, and one whose bytes changed does
not verify: both are misses, and the file is checked again. The MAC is keyed BLAKE2b (RFC 7693's
keyed mode, a MAC by design): 1.4 µs an entry against HMAC-SHA256's 4-5 µs, measured, and it runs
twice per file. Keeping the cache out of repositories
by default would not be enough: $GRADLINT_CACHE_DIR or a restored CI cache can still point at
foreign entries. Sharing a cache on purpose (a CI cache) means sharing the key file with it.

Entries are opened as regular files only (no symlinks, FIFOs or devices: a FIFO would block the
run, a link to /dev/zero would read until memory ran out), and never read past a size cap."""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import os
import secrets
import stat
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from gradlint import __version__
from gradlint.findings import Applicability, Edit, Finding, Fix, Reads, Severity
from gradlint.project import Disk

# Bump when the entry layout changes: a new format gets its own directory, and an entry carries
# the format too, so an entry copied from another build is a miss rather than a misread.
# 2: entries are keyed and tagged with the user's cache key.
# 3: an entry lists the other project modules its findings rest on, with their digests.
# 4: ... and what it read of each (the digests of project.ModuleFacts.part), the places a module was
#    looked for in vain, and the __init__.py files and project markers that set the file's roots.
# 5: a message names a decorated def or class of another module at its `def`/`class` line, not
#    its first decorator's: entries made before would answer otherwise than a fresh run.
FORMAT = 5

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

# An entry is a tag (32 raw bytes) then JSON. Real entries are a few hundred bytes per finding;
# 8 MiB is ~25k findings in one file. A bigger payload is not stored, a bigger file is a miss and
# is never read whole.
ENTRY_LIMIT = 8 * 1024 * 1024
TAG_BYTES = 32
KEY_BYTES = 32
KEY_FILE = "cache-key"

# Regular files only, opened without following a symlink and without blocking on a FIFO (where
# the platform has the flags; elsewhere an lstat comes first).
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_OPEN_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) \
    | getattr(os, "O_BINARY", 0)


class _Corrupt(ValueError):
    """An entry whose JSON parsed but whose shape is not one this build writes."""


class ResultCache:
    """Per-file results in <directory>, keyed by content, gradlint build and effective config, and
    bound to the user's cache key (see the module docstring)."""

    def __init__(self, directory: Path, run_key: str, secret: bytes | None = None):
        """`secret`: the key entries are bound to; None reads (or on first use creates) the
        user's key file in `user_cache_dir()`. Without a key, caching is off (`disabled_reason`)."""
        self.directory = Path(directory)
        self.entries = self.directory / f"{__version__}-format{FORMAT}"
        self.run_key = run_key
        self._entries_dir = str(self.entries)
        self.disabled_reason: str | None = None
        if secret is None:
            secret, self.disabled_reason = _user_key()
        self._secret = b"" if secret is None else bytes(secret)
        self._disk = Disk()  # the project's modules as they read now, each read once per run
        self._keyed()
        if self.disabled_reason is None:
            self.disabled_reason = self._prepare()

    def _keyed(self) -> None:
        # The run key is the same for every file of a run: hash it once and copy the state. The
        # names and the tags are told apart by BLAKE2's personalization.
        key = self._secret or b"\0"  # a cache without a key is disabled; this only keeps it whole
        self._name_state = hashlib.blake2b(_framed(self.run_key), key=key, digest_size=32, person=b"gradlint-name")
        self._tag_state = hashlib.blake2b(key=key, digest_size=TAG_BYTES, person=b"gradlint-entry")

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
        entry that is missing, unreadable, not a regular file, too big, truncated, corrupt, from
        another format or not made under this user's key, and one resting on another module of
        the project whose parts it read have changed since (or is gone)."""
        if self.disabled_reason is not None:
            return None
        target = self._entry_file(data, file_key)
        raw = _read_regular(target, TAG_BYTES + ENTRY_LIMIT)
        if raw is None or len(raw) < TAG_BYTES:
            return None
        tag, payload = raw[:TAG_BYTES], raw[TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(target, payload)):
            return None
        try:
            findings, depends = _decode(payload, path)
        except (ValueError, TypeError, RecursionError):
            return None
        # A module edited where the entry read nothing (a comment appended, a def nobody asked
        # about) leaves it good: project.Disk compares the parts read, not the bytes.
        if all(self._disk.still_reads(dependency, reads) for dependency, reads in depends):
            return findings
        return None

    def put(self, data: bytes, file_key: str, findings: Sequence[Finding],
            depends: dict[str, Reads] | None = None) -> None:
        """Store the findings for these bytes, and what they read of each other module they rest
        on; nothing when a finding is GL000/GL001."""
        if self.disabled_reason is not None:
            return
        if any(finding.code in UNCACHED_CODES for finding in findings):
            return
        payload = _encode(findings, depends or {})
        if len(payload) > ENTRY_LIMIT:
            return  # get() would not read it
        target = self._entry_file(data, file_key)
        try:
            handle, temp = tempfile.mkstemp(prefix=".tmp-", dir=self._entries_dir)
        except OSError as error:  # the directory went away or the disk turned read-only mid-run
            self.disabled_reason = _reason(self.entries, error)
            return
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(self._tag(target, payload))
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
        del state["_name_state"], state["_tag_state"]
        state["_disk"] = Disk()  # what the parent read of the project is not the workers' business
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._keyed()

    def _entry_file(self, data: bytes, file_key: str) -> str:
        # Keyed: without the user's key nobody can say which name an entry for a file will have.
        name = self._name_state.copy()
        name.update(_framed(file_key))
        name.update(hashlib.sha256(data).digest())
        return os.path.join(self._entries_dir, name.hexdigest())

    def _tag(self, target: str, payload: bytes) -> bytes:
        # The name is in the tag, so a genuine entry moved to another name does not verify either.
        tag = self._tag_state.copy()
        tag.update(_framed(os.path.basename(target)))
        tag.update(payload)
        return tag.digest()

    def _prepare(self) -> str | None:
        """Create the layout on first use; the reason caching is off for this run, if it is.

        The marker files (CACHEDIR.TAG, a `*` .gitignore) go only into a directory this call
        created itself: written into an existing one (a `cache-dir` naming the project root or
        `src`, say) they would hide it from git and from backups. The entries folder gets them too
        when this call made it, so a cache directory that already existed stays out of git as well."""
        try:
            made_top = _make_directory(self.directory, parents=True)
            if made_top:
                _write_markers(self.directory)
            made_entries = _make_directory(self.entries)
            # The entries folder is always gradlint's own: a symlink there (say, a checked-in one)
            # would send entries somewhere else.
            if not stat.S_ISDIR(os.lstat(self._entries_dir).st_mode):
                return f"the cache folder {self.entries} is not a directory (a symlink?); running without the cache"
            if made_entries:  # also when the top is new: with two first runs at once, either may make it
                _write_markers(self.entries)
            # An existing directory on a read-only mount (or, as non-root, without write permission)
            # passes everything above: only creating a file shows it.
            handle, probe = tempfile.mkstemp(prefix=".tmp-", dir=self._entries_dir)
            os.close(handle)
            os.unlink(probe)
        except OSError as error:
            return _reason(self.directory, error)
        return None


def user_cache_dir() -> Path | None:
    """gradlint's folder in the user's cache: $XDG_CACHE_HOME/gradlint where that is set (to an
    absolute path, as the XDG spec asks), else ~/Library/Caches/gradlint on macOS,
    %LOCALAPPDATA%\\gradlint on Windows, ~/.cache/gradlint elsewhere. None without a home."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        try:
            home = Path.home()
        except (RuntimeError, KeyError, OSError):
            return None
        if sys.platform == "darwin":
            base = str(home / "Library" / "Caches")
        elif os.name == "nt":
            base = os.environ.get("LOCALAPPDATA") or str(home / "AppData" / "Local")
        else:
            base = str(home / ".cache")
    return Path(base) / "gradlint"


def _user_key() -> tuple[bytes | None, str | None]:
    """The user's cache key, created on first use; else None and why caching is off."""
    folder = user_cache_dir()
    if folder is None:
        return None, "cannot find the user's home folder for the cache key; running without the cache"
    path = folder / KEY_FILE
    key = _read_key(path)
    if key is not None:
        return key, None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(prefix=".tmp-", dir=folder)  # 0600
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(secrets.token_bytes(KEY_BYTES))
            try:
                # A link, not a rename: of two first runs at once, one key wins and both use it.
                os.link(temp, path)
            except FileExistsError:
                if _read_key(path) is None:  # still no usable key (damaged, a link, too open): a new one
                    os.replace(temp, path)
            except OSError:  # a filesystem without hard links
                os.replace(temp, path)
        finally:
            try:
                os.unlink(temp)
            except OSError:
                pass
    except OSError as error:
        return None, f"cannot create the cache key in {folder} ({error.strerror or error}); running without the cache"
    key = _read_key(path)
    if key is None:
        return None, f"the cache key {path} is not a private regular file of {KEY_BYTES} bytes; running without the cache"
    return key, None


def _read_key(path: Path) -> bytes | None:
    """The key, if the file is a regular file of the right size that only this user can use."""
    try:
        handle, info = _open_regular(str(path))
    except (OSError, ValueError):
        return None
    try:
        if info.st_size != KEY_BYTES:
            return None
        if hasattr(os, "geteuid") and (info.st_uid != os.geteuid() or info.st_mode & 0o077):
            return None
        data = os.read(handle, KEY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(handle)
    return data if len(data) == KEY_BYTES else None


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    """A descriptor for `path` and its fstat, if it is a regular file (not followed through a
    symlink); OSError otherwise. Opening a FIFO with O_NONBLOCK returns at once, and fstat then
    refuses it."""
    if not _NOFOLLOW and not stat.S_ISREG(os.lstat(path).st_mode):
        raise OSError(f"not a regular file: {path}")
    handle = os.open(path, _OPEN_FLAGS)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"not a regular file: {path}")
    except BaseException:
        os.close(handle)
        raise
    return handle, info


def _read_regular(path: str, limit: int) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes; None for anything else."""
    try:
        handle, info = _open_regular(path)
    except (OSError, ValueError):
        return None
    try:
        size = info.st_size
        if size > limit:
            return None
        # One byte more than fstat said, so a file that grew since shows it; one read, mostly.
        data = os.read(handle, size + 1)
        while 0 < len(data) < size:
            more = os.read(handle, size + 1 - len(data))
            if not more:
                break
            data += more
    except OSError:
        return None
    finally:
        os.close(handle)
    return data if len(data) == size else None


def _make_directory(path: Path, parents: bool = False) -> bool:
    """Make `path`; True if this call made it, False if it was there already (or another process
    made it first). Raises OSError when it cannot be made or is not a directory."""
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not path.is_dir():
            raise
        return False
    return True


def _write_markers(directory: Path) -> None:
    for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", GITIGNORE)):
        marker = directory / name
        _write_atomically(marker, text.encode("ascii"))
        marker.chmod(0o644)  # mkstemp makes it 0600: others' git and backup tools read it too


# ----- entries --------------------------------------------------------------------------------
# JSON of plain lists, not marshal: marshal.loads is faster (0.2-1.6 µs against json's 2-6 µs for 0-3
# findings, measured) but both vanish next to the ~15 µs of opening and reading the entry, and
# json.loads can build nothing but plain values from a corrupt file (marshal promises no such thing).


def _encode(findings: Iterable[Finding], depends: dict[str, Reads]) -> bytes:
    rows = [[f.line, f.column, f.code, f.message, f.name, f.severity.value, f.end_line, f.end_column,
             f.subject, _fix_row(f.fix)] for f in findings]
    reads = [[path, r.dotted, r.digest, sorted(r.parts.items())] for path, r in sorted(depends.items())]
    # ensure_ascii (the default) escapes lone surrogates instead of failing to encode them.
    return json.dumps([FORMAT, rows, reads], separators=(",", ":")).encode("ascii")


def _fix_row(fix: Fix | None) -> list | None:
    if fix is None:
        return None
    return [fix.message, fix.applicability.value,
            [[e.start, e.end, e.content, e.line, e.column, e.end_line, e.end_column] for e in fix.edits]]


def _decode(raw: bytes, path: str) -> tuple[list[Finding], list[tuple[str, Reads]]]:
    entry = json.loads(raw)
    if type(entry) is not list or len(entry) != 3 or entry[0] != FORMAT or type(entry[1]) is not list \
            or type(entry[2]) is not list:
        raise _Corrupt("not an entry of this format")
    depends = []
    for row in entry[2]:
        if type(row) is not list or len(row) != 4 or type(row[3]) is not list:
            raise _Corrupt("not a dependency")
        _require(str, *row[:3])
        parts = {}
        for part in row[3]:
            if type(part) is not list or len(part) != 2:
                raise _Corrupt("not a part")
            _require(str, *part)
            parts[part[0]] = part[1]
        depends.append((row[0], Reads(row[1], row[2], parts)))
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
    return findings, depends


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
