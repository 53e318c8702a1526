"""Write a fixed file back without ever leaving it half-written or changing what is not ours to change."""

from __future__ import annotations

import os
import stat
import tempfile

from gradlint.source import text_digest

_BOM = b"\xef\xbb\xbf"


class NotWritten(Exception):
    """The file was left as it was; the message says why, in one line."""


def write_fixed(path: str, fixed: str, expected_digest: str) -> str:
    """Replace `path`'s text with `fixed` atomically (temp file in the same directory, then rename),
    keeping its byte-order mark and permission bits; newline style is already the file's own, since
    fixes write the file's newline. Refuses when the file changed after it was checked. Returns
    the text it replaced."""
    target = os.path.realpath(path)  # a symlink stays a symlink; its target gets the new text
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
