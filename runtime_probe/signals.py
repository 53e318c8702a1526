"""Secondary memory signals: glibc heap bytes, CUDA allocator bytes, and how much memory is left.

Neither names a tensor; the tracker stays the source of truth. torch.cuda.memory_allocated()
returns 0 silently on a CPU-only torch 2.13 (measured), so it is read only when CUDA is available.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _load_mallinfo2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None  # not glibc, or glibc < 2.33
    fn.restype = _Mallinfo2
    return fn


_mallinfo2 = _load_mallinfo2()


def heap_bytes() -> int | None:
    """glibc bytes in use (small blocks + mmapped): it also sees C++ autograd nodes."""
    if _mallinfo2 is None:
        return None
    info = _mallinfo2()
    return int(info.uordblks + info.hblkhd)


def cuda_available() -> bool:
    import torch

    try:
        return bool(torch.cuda.is_available())
    except (AttributeError, AssertionError, RuntimeError):
        return False


def cuda_allocated() -> int | None:
    import torch

    if not cuda_available():
        return None
    try:
        return int(torch.cuda.memory_allocated())
    except (AttributeError, AssertionError, RuntimeError, KeyError):
        return None


def cuda_reserved() -> int | None:
    """Bytes the caching allocator holds from the driver (torch.cuda.memory_reserved()): what
    nvidia-smi shows grow, allocated or not."""
    import torch

    if not cuda_available():
        return None
    try:
        return int(torch.cuda.memory_reserved())
    except (AttributeError, AssertionError, RuntimeError, KeyError):
        return None


def device_free_bytes(device: str) -> int | None:
    """Bytes a leak can still take before the device runs out."""
    if device == "cuda":
        import torch

        try:
            free, _total = torch.cuda.mem_get_info()
            return int(free)
        except (AttributeError, AssertionError, RuntimeError, KeyError):
            return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
