"""LiveStorageTracker: exact live tensor bytes, per storage, with the op and user line that made it.

A TorchDispatchMode sees every op output in forward, backward and the optimizer (the autograd
engine carries the mode's thread-local state on CPU: measured on torch 2.13). Each new output's
untyped storage is recorded once with a weakref: views share their base's storage object, and the
weakref fires only when the last view dies, so the count is exact to the byte (ground truth A0:
131072 B/step measured for a 131072 B leak, 0 for the control).
"""

from __future__ import annotations

import os
import sys
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_PROBE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The bundled op is library code: the line a user wants is the one that called it.
# The bundled scenarios stand for user code: their lines are the ones to report.
_SCENARIO_DIR = os.path.join(_PROBE_DIR, "scenarios") + os.sep
_CUDA_EXT_DIR = os.path.join(os.path.dirname(_PROBE_DIR.rstrip(os.sep)), "cuda_ext") + os.sep


def _library_dirs() -> tuple[str, ...]:
    dirs = [_TORCH_DIR, _PROBE_DIR, _CUDA_EXT_DIR]
    try:
        import gradlint.cuda_ext as ext  # no torch import at module import

        dirs.append(os.path.dirname(os.path.abspath(ext.__file__)) + os.sep)
    except ImportError:
        pass
    return tuple(dirs)


def _skip_dynamo(*codes) -> bool:
    """Tell Dynamo never to trace these frames or what they call, once, in C.

    TorchDispatchMode otherwise wraps every subclass's __torch_dispatch__ in torch._disable_dynamo,
    which runs about 4 us of Python around each op (five set_eval_frame calls, measured with
    cProfile on the clean scenario: 5300 wrapper calls, 21 ms of 183 ms). Marking the code objects
    SKIP for themselves and everything they call keeps a compiled step from tracing into the probe
    at no per-op cost. Private torch API: without it, the probe keeps torch's wrapper.
    """
    try:
        from torch._C._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
        for code in codes:
            set_code_exec_strategy(code, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))
    except (ImportError, AttributeError, TypeError, RuntimeError):
        return False
    return True


class StorageRecord(weakref.ref):
    """A weakref to one storage that carries what the report needs about it; call it for the storage.

    One object per storage instead of a dataclass plus a weakref plus a callback closure: about
    2 us less per new storage, which the probe pays on every op that allocates.
    """

    __slots__ = ("key", "nbytes", "step", "op", "file", "line")
    key: int
    nbytes: int
    step: int  # the step that created it (0 = before the first step)
    op: str  # the aten op whose output it was
    file: str
    line: int


def _freed_callback(tracker_ref: weakref.ref):
    def freed(record: StorageRecord) -> None:
        tracker = tracker_ref()
        # Only drop our own entry: a new storage may already reuse the address.
        if tracker is not None and tracker.records.get(record.key) is record:
            del tracker.records[record.key]
            tracker.live_bytes -= record.nbytes
    return freed


class LiveStorageTracker(TorchDispatchMode):
    """Counts the bytes of every live storage an op produced while the mode was on."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Asked once, when the class is made: wrap per call only if the one-time skip failed.
        methods = [cls.__dict__[name] for name in ("__torch_dispatch__", "_record", "_user_line")]
        return not _skip_dynamo(*(m.__code__ for m in methods))

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[int, StorageRecord] = {}
        self.live_bytes = 0
        self.peak_bytes = 0
        self.step = 0
        # Tensor objects made while tracking, to find held graphs and the holders of survivors.
        # A dict of plain weakrefs by id, not a WeakSet: adding to a WeakSet hashes the tensor
        # through Tensor.__hash__ in Python, about 5 us an op (cProfile, clean scenario). A reused
        # id only replaces a dead entry; dead ones are dropped every few steps.
        self._tensors: dict[int, weakref.ref] = {}
        self._skip_dirs, self._user_dirs = _library_dirs(), (_SCENARIO_DIR,)
        self._freed = _freed_callback(weakref.ref(self))
        self._skip_cache: dict[str, bool] = {}

    # -- the mode -----------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # Most ops return one tensor or a flat tuple: skip pytree's generic walk for those
        # (about 8 us of the per-op cost, measured with cProfile on the clean scenario).
        if isinstance(out, torch.Tensor):
            self._record(out, func)
        elif isinstance(out, (tuple, list)) and not any(isinstance(t, (tuple, list, dict)) for t in out):
            for t in out:
                if isinstance(t, torch.Tensor):
                    self._record(t, func)
        else:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self._record(t, func)
        return out

    def _record(self, t: torch.Tensor, func) -> None:
        try:
            self._tensors[id(t)] = weakref.ref(t)
            st = t.untyped_storage()
        except (RuntimeError, TypeError, NotImplementedError):
            return  # sparse, meta without storage, or a subclass that refuses: nothing to count
        key = st._cdata
        if key in self.records:
            return
        record = StorageRecord(st, self._freed)
        record.key = key
        record.nbytes = nbytes = st.nbytes()
        record.step = self.step
        record.op = getattr(func, "__name__", None) or str(func)
        record.file, record.line = self._user_line()
        self.records[key] = record
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes

    def _user_line(self) -> tuple[str, int]:
        frame = sys._getframe(3)
        skip = self._skip_cache
        while frame is not None:
            filename = frame.f_code.co_filename
            hidden = skip.get(filename)
            if hidden is None:
                hidden = skip[filename] = (filename.startswith(self._skip_dirs) and not filename.startswith(self._user_dirs)
                                           or filename.startswith("<frozen"))
            if not hidden:
                return filename, frame.f_lineno
            frame = frame.f_back
        return "?", 0

    # -- queries ------------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        self.step = step
        self.peak_bytes = self.live_bytes
        if step % 64 == 0:
            self._tensors = {key: ref for key, ref in self._tensors.items() if ref() is not None}

    def survivors(self, after_step: int) -> list[StorageRecord]:
        """Live storages created after `after_step`."""
        return [r for r in list(self.records.values()) if r.step > after_step and r() is not None]

    def live_tensors(self) -> list[torch.Tensor]:
        return [t for t in (ref() for ref in list(self._tensors.values())) if t is not None]

    def storage_key(self, t: torch.Tensor) -> int | None:
        try:
            return t.untyped_storage()._cdata
        except (RuntimeError, TypeError, NotImplementedError):
            return None
