"""Whose file a frame or a class is in: the user's, or a library's (the standard library and
installed packages). One answer for the tracker's "created at" lines, the holder names and the
files the cross-check reads, so they never disagree about what the user can change."""

from __future__ import annotations

import functools
import os
import sysconfig


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(key)}
    return tuple(os.path.join(os.path.abspath(d), "") for d in dirs)


# Cached per file: the holder scan runs once per named holder over every loaded module (about 1900
# with torch): about 4 ms a holder uncached, mostly these path checks, and 1 to 2 ms cached (measured).
@functools.cache
def is_user_file(file: str) -> bool:
    """Not the standard library's, nor an installed package's (any site- or dist-packages folder:
    a virtual environment's, a user site, a system one)."""
    file = os.path.abspath(file)
    return not file.startswith(_library_dirs()) and not any(
        f"{os.sep}{packages}{os.sep}" in file for packages in ("site-packages", "dist-packages"))
