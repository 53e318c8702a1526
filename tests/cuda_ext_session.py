"""One extension build per test session, shared by the test_cuda_ext* modules.

Every module's `ext` fixture points GRADLINT_EXT_CACHE at the same per-session directory before
anything loads the library, so the session compiles once (about half a minute on 2 cores) and
the user's own cache is never touched.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_session_cache: Path | None = None


def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    global _session_cache
    if _session_cache is None:
        _session_cache = tmp_path_factory.mktemp("gradlint-ext-cache")
        os.environ["GRADLINT_EXT_CACHE"] = str(_session_cache)
    return _session_cache


def compiled_extension(tmp_path_factory: pytest.TempPathFactory):
    """gradlint.cuda_ext with its compiled library loaded; fails (never skips) if it cannot build."""
    session_cache(tmp_path_factory)
    import gradlint.cuda_ext as ext

    backend = ext.load()
    assert backend.name in (ext.COMPILED_CPU, ext.COMPILED_CUDA), f"the extension did not build: {backend.fallback_reason}"
    return ext
