"""Compile the scatter-add library on first use and cache it across processes.

The cache directory is keyed by torch version, compiler, CUDA toolkit and a hash of every file in
csrc/, so a second process loads the library it finds there without running a compiler, and an
edit to a source, a torch upgrade or another compiler gets a fresh directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
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


# Loads a library in a fresh interpreter and calls the op with arguments it rejects: it must raise.
# A library whose C++ exceptions cannot cross into torch ends the process instead. Built by the
# /opt/gcc/bin/g++ of an H200 machine's image (a g++ 13.3 wrapper whose libraries link libstdc++
# statically: ldd lists no libstdc++) for torch 2.11, every error the op raised (a bad argument,
# an index out of range, on CPU and CUDA) was a segfault; built by /usr/bin/g++ there, each raised.
RAISE_CHECK = textwrap.dedent(
    """
    import sys, torch
    torch.ops.load_library(sys.argv[1])
    try:
        torch.ops.gradlint.scatter_add(torch.ones(2, 1), torch.zeros(1, dtype=torch.int64), 1, True, True)
    except RuntimeError:
        sys.exit(0)
    sys.exit(3)
    """
)
RAISE_CHECK_RETURNED = 3  # the call with bad arguments returned
RAISE_CHECKED = "raises-checked"  # in the build directory once the library passed RAISE_CHECK


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


def _cpp_extension():
    """torch.utils.cpp_extension, imported without its chatter: on a CUDA build of torch with no
    GPU, importing it says "No CUDA runtime is found, using CUDA_HOME=..." (a print to stderr on
    torch 2.4.1, a log warning on 2.11 and 2.13) before any build is asked for. A fallback is one
    line; the toolkit it names is in the build key and in cuda_skip_reason where it matters."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    disabled, logger.disabled = logger.disabled, True
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            from torch.utils import cpp_extension
    finally:
        logger.disabled = disabled
    return cpp_extension


def find_toolchain() -> Toolchain:
    """What the build will use, or BuildUnavailable naming what is missing."""
    cpp_extension = _cpp_extension()

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
    cpp_extension = _cpp_extension()

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
        check_errors_reach_python(library, toolchain)
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
    # torch's load has loaded the library into this process already: one that fails the check
    # stays loaded but unused (the backend is then the reference, and nothing calls the op).
    check_errors_reach_python(library, toolchain)
    after = library.stat().st_mtime_ns if library.exists() else None
    return BuiltLibrary(library, with_cuda, built_now=after != before, seconds=time.perf_counter() - start)


def check_errors_reach_python(library: Path, toolchain: Toolchain) -> None:
    """Raise BuildUnavailable unless an error the library raises reaches Python as an exception.

    Run once per build directory (about 2 s: a fresh interpreter imports torch), remembered by a
    marker file; in a subprocess, because a failing library ends the process that calls it."""
    marker = library.parent / RAISE_CHECKED
    if marker.exists():
        return
    try:
        done = subprocess.run([sys.executable, "-c", RAISE_CHECK, str(library)], capture_output=True, text=True,
                              timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BuildUnavailable(f"could not check that the built library raises errors ({error})") from error
    if done.returncode == 0:
        try:
            marker.touch()
        except OSError:
            pass  # checked again next time
        return
    if done.returncode == RAISE_CHECK_RETURNED:
        how = "returned"
    elif done.returncode < 0:
        try:
            how = f"died of {signal.Signals(-done.returncode).name}"
        except ValueError:
            how = f"died of signal {-done.returncode}"
    else:
        # The check itself could not run (the fresh interpreter finds no torch where this process
        # found it through a sys.path edit, say): the library is used, as before the check existed,
        # and checked again next time.
        return
    raise BuildUnavailable(
        f"the library built by {toolchain.cxx} cannot raise errors into torch (a call with bad arguments {how} "
        f"instead of raising; a compiler that links its own C++ runtime does this): set CXX to another compiler"
    )
