"""gradlint.cuda_ext: the bundled scatter-add custom op, written the way a custom op should be.

    from gradlint.cuda_ext import scatter_add
    out = scatter_add(src, index, dim_size)          # out[index[i]] += src[i]

`src` is [N, D] or [N] (float32, float64, float16, bfloat16; half types accumulate in float32),
`index` is [N] int32 or int64 (both native, no upcast copy), `out` is [dim_size, D] or [dim_size].
The backward is a gather (`index_select`), deterministic on every device.

Two algorithms: `deterministic` (every target summed from zero in ascending source order:
bitwise the same on every run and thread count; on CPU one in-order pass at 1-2 threads, a stable
sort by target with sums parallel over output rows at more) and `atomic` (one atomic add per element).
`deterministic=None` picks deterministic on CPU, or when
`torch.are_deterministic_algorithms_enabled()`, and atomic on CUDA otherwise.

The C++ (and, with a GPU and a CUDA toolkit, CUDA) library compiles on first use into a cache
(`$GRADLINT_EXT_CACHE`, else `$XDG_CACHE_HOME/gradlint/cuda_ext` or `~/.cache/gradlint/cuda_ext`).
Without a compiler or ninja, when the build fails, or when the built library cannot raise an error
into torch (checked once per build, in a fresh interpreter: a compiler that links its own C++
runtime makes every error a crash), one warning says why and scatter_add runs a pure-torch
reference instead: `BACKEND` is then "reference" and `fallback_reason` says why.

Importing this package does not import torch; the first call (or reading BACKEND) does.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from .build import BuiltLibrary

# BACKEND and fallback_reason are module attributes too, computed on first read (see
# __getattr__); they stay out of __all__ so that a star import does not start a compile.
__all__ = ["Backend", "ExtensionFallbackWarning", "load", "scatter_add"]

COMPILED_CPU = "compiled-cpu"
COMPILED_CUDA = "compiled-cuda"  # CPU and CUDA kernels
REFERENCE = "reference"


class ExtensionFallbackWarning(RuntimeWarning):
    """The compiled op is unavailable and the pure-torch reference runs instead."""


@dataclass(frozen=True)
class Backend:
    name: str  # COMPILED_CPU, COMPILED_CUDA or REFERENCE
    fallback_reason: str | None  # why REFERENCE, in one line
    library: BuiltLibrary | None
    cuda_skip_reason: str | None  # why the CUDA kernels were not built, when they were not

    @property
    def devices(self) -> tuple[str, ...]:
        return {COMPILED_CPU: ("cpu",), COMPILED_CUDA: ("cpu", "cuda")}.get(self.name, ())


_lock = threading.Lock()
_backend: Backend | None = None
_warned_devices: set[str] = set()


def load() -> Backend:
    """Build (first time) or load (cached) the library; never raises for a missing toolchain."""
    global _backend
    if _backend is not None:
        # Once loaded, no lock: torch.compile(fullgraph=True) traces this call and cannot trace one.
        return _backend
    with _lock:
        if _backend is None:
            _backend = _load_backend()
        return _backend


def _load_backend() -> Backend:
    from . import build, ops

    try:
        toolchain = build.find_toolchain()
        library = build.build_and_load(toolchain)
    except build.BuildUnavailable as why:
        warnings.warn(
            f"gradlint.cuda_ext: {why}; scatter_add uses the pure-torch reference (index_add_) instead",
            ExtensionFallbackWarning,
            stacklevel=4,
        )
        return Backend(REFERENCE, str(why), None, None)
    ops.register()
    name = COMPILED_CUDA if library.with_cuda else COMPILED_CPU
    return Backend(name, None, library, toolchain.cuda_skip_reason)


def scatter_add(
    src: torch.Tensor,
    index: torch.Tensor,
    dim_size: int,
    *,
    deterministic: bool | None = None,
    check_index: bool = True,
) -> torch.Tensor:
    """out[index[i]] += src[i] into a zeroed [dim_size, *src.shape[1:]] tensor.

    check_index=False skips the range check on CUDA (it costs a device sync); the kernels still
    never write outside `out`. On CPU the check always runs.
    """
    import torch

    backend = load()
    if deterministic is None:
        deterministic = src.device.type == "cpu" or torch.are_deterministic_algorithms_enabled()
    if src.device.type in backend.devices:
        return torch.ops.gradlint.scatter_add(src, index, dim_size, deterministic, check_index)
    if backend.name != REFERENCE and src.device.type not in _warned_devices:
        _warned_devices.add(src.device.type)
        warnings.warn(
            f"gradlint.cuda_ext: no compiled kernels for {src.device.type} "
            f"({backend.cuda_skip_reason or 'not built'}); using the pure-torch reference there",
            ExtensionFallbackWarning,
            stacklevel=2,
        )
    from .reference import scatter_add_reference

    return scatter_add_reference(src, index, dim_size, check_index=check_index)


def __getattr__(name: str):
    # BACKEND and fallback_reason are computed on first read: reading them loads the library.
    if name == "BACKEND":
        return load().name
    if name == "fallback_reason":
        return load().fallback_reason
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
