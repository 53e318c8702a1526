"""Read a file for linting, turning every way it can be bad into one clear sentence."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass

# A 28k-line file costs a libcst worker about 1 GB (measured); 1 MiB is ~25k lines of typical code.
DEFAULT_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Unreadable:
    reason: str


def read_source(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str | Unreadable:
    data = read_bytes(path, max_bytes)
    if isinstance(data, Unreadable):
        return data
    return decode_source(data, max_bytes)


def read_bytes(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes | Unreadable:
    # Opened without blocking and checked on the open descriptor: a path checked with stat() and
    # then opened could be swapped for a FIFO in between, and a FIFO blocks the run forever.
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        if error.errno == errno.ELOOP:
            return Unreadable("symlink loop")
        return Unreadable(f"cannot read: {error.strerror or error}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Unreadable("not a regular file")
        size = info.st_size
        if size > max_bytes:
            return Unreadable(f"file is {size / 1e6:.1f} MB, over the {max_bytes / 1e6:.1f} MB limit (max-file-size)")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            # The size read, plus one byte to see a file that grew since: never a buffer of
            # max-file-size for every file (the limit may be raised to hundreds of MB).
            data = handle.read(size + 1)
            if len(data) > size:  # it grew: read on, to the limit, rather than lint half a file
                data += handle.read(max_bytes + 1 - len(data))
    except OSError as error:
        return Unreadable(f"cannot read: {error.strerror or error}")
    finally:
        os.close(fd)
    return data


def decode_source(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> str | Unreadable:
    if len(data) > max_bytes:
        return Unreadable(f"input is over the {max_bytes / 1e6:.1f} MB limit (max-file-size)")
    if b"\0" in data:
        offset = data.index(b"\0")
        return Unreadable(f"contains a NUL byte at offset {offset}: not Python source")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        return Unreadable(f"not valid UTF-8 (byte 0x{data[error.start]:02x} on line {line})")


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def split_lines(text: str) -> list[str]:
    """Lines with their breaks, broken where Python breaks them: str.splitlines also breaks at form
    feeds and other separators, which would make a diff that patch(1) cannot apply."""
    return _LINE.findall(text)


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
