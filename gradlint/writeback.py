"""Write a fixed file back without ever leaving it half-written or changing what is not ours to change.

What `--fix` will not write, and says so (`Refused`, one line per file), leaving the file and its
findings as they were:
- a file outside the paths being checked: a symlink in a checked directory whose target lies
  elsewhere (the target is the file that would be rewritten). A path named on the command line is
  inside by definition, so `gradlint check --fix link.py` still fixes what link.py points to;
- a read-only file (no write bit for its owner, or one the user may not write), as editors refuse:
  replacing it would succeed in a writable directory and silently drop the protection;
- a file with more than one hard link: the rename that makes the write atomic would give this name
  a new inode and leave the other names with the old text, and writing in place would lose the
  atomicity, so gradlint does neither.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Sequence

from gradlint.source import text_digest

_BOM = b"\xef\xbb\xbf"


class NotWritten(Exception):
    """The file was left as it was; the message says why, in one line."""


class Refused(Exception):
    """The file was left as it was on purpose (the policy above); the message says why, in one line."""


def _inside(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def resolved_roots(paths: Sequence[os.PathLike[str] | str]) -> list[str]:
    """The paths given on the command line as real paths: what a fixed file must lie inside."""
    return [os.path.realpath(path) for path in paths]


def refusal(path: str, roots: Sequence[str] | None) -> str | None:
    """Why `--fix` must leave `path` alone, or None. `roots` from `resolved_roots` (None: no
    containment check). A file that cannot be looked at is left to the write to report."""
    target = os.path.realpath(path)
    if roots is not None and not any(_inside(target, root) for root in roots):
        how = "is a symlink to" if os.path.islink(path) else "resolves to"
        return f"it {how} {target}, outside the paths being checked"
    try:
        info = os.stat(target)
    except OSError:
        return None
    if not info.st_mode & stat.S_IWUSR or not os.access(target, os.W_OK):
        return "it is read-only"
    if info.st_nlink > 1:
        return f"it has {info.st_nlink} hard links, and replacing it would split them"
    return None


def write_fixed(path: str, fixed: str, expected_digest: str, roots: Sequence[str] | None = None) -> str:
    """Replace `path`'s text with `fixed` atomically (temp file in the same directory, then rename),
    keeping its byte-order mark and permission bits; newline style is already the file's own, since
    fixes write the file's newline. Raises Refused for what the module's policy leaves alone and
    NotWritten when the file changed after it was checked or cannot be written. Returns the text it
    replaced."""
    target = os.path.realpath(path)  # a symlink stays a symlink; its target gets the new text
    reason = refusal(path, roots)
    if reason is not None:
        raise Refused(reason)
    try:
        with open(target, "rb") as handle:
            data = handle.read()
        info = os.stat(target)
    except OSError as error:
        raise NotWritten(f"cannot read it again: {error.strerror or error}") from None
    bom = data.startswith(_BOM)
    try:
        current = (data[3:] if bom else data).decode("utf-8")
    except UnicodeDecodeError:
        current = None
    if current is None or text_digest(current) != expected_digest:
        raise NotWritten("it changed while gradlint was checking it; run again")
    payload = (_BOM if bom else b"") + fixed.encode("utf-8")
    directory = os.path.dirname(target) or "."
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".gradlint",
                                                 dir=directory)
    except OSError as error:
        raise NotWritten(f"cannot create a temporary file beside it: {error.strerror or error}") from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, stat.S_IMODE(info.st_mode))
        try:
            os.chown(temporary, info.st_uid, info.st_gid)
        except OSError:
            pass  # only root may give a file away; the owner is then the one running gradlint
        os.replace(temporary, target)
    except OSError as error:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise NotWritten(f"cannot write it: {error.strerror or error}") from None
    return current
