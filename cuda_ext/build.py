"""Compile the scatter-add library on first use and cache it across processes.

The cache directory is keyed by torch version, compiler, CUDA toolkit and a hash of every file in
csrc/, so a second process loads the library it finds there without running a compiler, and an
edit to a source, a torch upgrade or another compiler gets a fresh directory.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

LIBRARY_NAME = "gradlint_scatter_add"
CSRC = Path(__file__).resolve().parent / "csrc"
CPU_SOURCES = ("scatter_add_op.cpp", "scatter_add_cpu.cpp")
CUDA_SOURCES = ("scatter_add_cuda.cpp", "scatter_add_kernels.cu")
CACHE_ENV = "GRADLINT_EXT_CACHE"
# torch.utils.cpp_extension compiles without optimisation unless asked.
EXTRA_CFLAGS = ("-O3",)
EXTRA_CUDA_CFLAGS = ("-O3",)


class BuildUnavailable(Exception):
    """The library cannot be built or loaded here; str(self) says why in one line."""


@dataclass(frozen=True)
class Toolchain:
    cxx: str
    cxx_version: str
    ninja: str
    nvcc: str | None  # None: build the CPU part only
    nvcc_version: str
    cuda_skip_reason: str | None  # why the CUDA part is left out, when it is


@dataclass(frozen=True)
class BuiltLibrary:
    path: Path
    with_cuda: bool
    built_now: bool  # False: loaded from the cache without compiling
    seconds: float  # wall time of build + load


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gradlint" / "cuda_ext"


def _first_line_of(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else ""


def find_toolchain() -> Toolchain:
    """What the build will use, or BuildUnavailable naming what is missing."""
    from torch.utils import cpp_extension

    # torch.utils.cpp_extension compiles with $CXX, else `c++`, and runs `ninja` from PATH.
    cxx_name = os.environ.get("CXX", "c++")
    cxx = shutil.which(cxx_name)
    if cxx is None:
        where = "does not exist" if os.sep in cxx_name else "is not on PATH"
        raise BuildUnavailable(f"no C++ compiler: CXX={cxx_name!r} {where}")
    ninja = shutil.which("ninja")
    if ninja is None:
        # A `pip install ninja` in a venv that is not activated is not on PATH either.
        raise BuildUnavailable("ninja is not on PATH (torch.utils.cpp_extension runs it; install it where PATH finds it)")

    nvcc, skip = None, None
    if not torch.cuda.is_available():
        skip = "torch.cuda.is_available() is False"
    elif cpp_extension.CUDA_HOME is None:
        skip = "CUDA is available but no CUDA toolkit was found (set CUDA_HOME)"
    else:
        candidate = Path(cpp_extension.CUDA_HOME) / "bin" / "nvcc"
        if candidate.exists():
            nvcc = str(candidate)
        else:
            skip = f"no nvcc at {candidate}"
    return Toolchain(
        cxx=cxx,
        cxx_version=_first_line_of([cxx, "--version"]),
        ninja=ninja,
        nvcc=nvcc,
        nvcc_version=_first_line_of([nvcc, "--version"]) if nvcc else "",
        cuda_skip_reason=skip,
    )


def source_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(CSRC.iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_key(toolchain: Toolchain) -> str:
    """The cache directory name: readable torch version, then a hash of everything else."""
    parts = [
        torch.__version__,
        str(torch.version.cuda),
        sys.implementation.cache_tag,
        toolchain.cxx,
        toolchain.cxx_version,
        toolchain.nvcc or "",
        toolchain.nvcc_version,
        " ".join(EXTRA_CFLAGS + EXTRA_CUDA_CFLAGS),
        source_digest(),
    ]
    hashed = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    readable = re.sub(r"[^A-Za-z0-9.+-]", "_", f"torch-{torch.__version__}")
    return f"{readable}-{'cuda' if toolchain.nvcc else 'cpu'}-{hashed}"


def _short_build_error(error: BaseException, log: Path) -> str:
    text = str(error)
    for line in text.splitlines():
        if re.search(r"\berror\b", line, re.IGNORECASE) and "Error building extension" not in line:
            detail = line.strip()
            break
    else:
        detail = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return f"building the C++ extension failed ({detail[:200]}); full log: {log}"


def build_and_load(toolchain: Toolchain) -> BuiltLibrary:
    """Load the cached library, compiling it first when the cache has none."""
    from torch.utils import cpp_extension

    start = time.perf_counter()
    build_dir = cache_root() / build_key(toolchain)
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BuildUnavailable(f"cannot create the build cache {build_dir} ({error}); set {CACHE_ENV}") from error
    library = build_dir / f"{LIBRARY_NAME}{cpp_extension.LIB_EXT}"  # the name torch's load gives it
    with_cuda = toolchain.nvcc is not None

    # torch's FileBaton holds `lock` while a build runs: a library seen then may be half-written.
    if library.exists() and not (build_dir / "lock").exists():
        try:
            torch.ops.load_library(str(library))
            return BuiltLibrary(library, with_cuda, built_now=False, seconds=time.perf_counter() - start)
        except OSError:
            pass  # a truncated file from an interrupted build: let ninja redo it

    before = library.stat().st_mtime_ns if library.exists() else None
    sources = [str(CSRC / name) for name in CPU_SOURCES + (CUDA_SOURCES if with_cuda else ())]
    log = build_dir / "build-error.log"
    # torch warns about compiler versions while it builds; keep those for a build that works,
    # and let a failed build speak with one line only.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cpp_extension.load(
                name=LIBRARY_NAME,
                sources=sources,
                extra_cflags=list(EXTRA_CFLAGS),
                extra_cuda_cflags=list(EXTRA_CUDA_CFLAGS),
                build_directory=str(build_dir),
                with_cuda=with_cuda,
                is_python_module=False,
                verbose=False,
            )
        except Exception as error:  # whatever stops the build, scatter_add must still run
            log.write_text(str(error))
            raise BuildUnavailable(_short_build_error(error, log)) from error
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    log.unlink(missing_ok=True)
    after = library.stat().st_mtime_ns if library.exists() else None
    return BuiltLibrary(library, with_cuda, built_now=after != before, seconds=time.perf_counter() - start)
