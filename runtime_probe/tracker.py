"""LiveStorageTracker: exact live tensor bytes, per storage, with the op and user line that made it.

A TorchDispatchMode sees every op output in forward, backward and the optimizer (the autograd
engine carries the mode's thread-local state on CPU: measured on torch 2.13). Each new output's
untyped storage is recorded once with a weakref: views share their base's storage object, and the
weakref fires only when the last view dies, so the count is exact to the byte (ground truth A0:
131072 B/step measured for a 131072 B leak, 0 for the control).

With a stride (stride.py) some steps run without the mode, and a tracked step can meet their
storages later through an op that allocates nothing: a view, `detach`, an in-place or `out=` op.
The autograd engine does this on its own: a non-leaf output a node saved is kept as its bare data
(to break the output -> node -> output cycle), and unpacking it in backward makes a new tensor on
that data through `aten::detach`, which an active dispatch mode sees (torch 2.13). So a tracked
step's backward through a graph chained across steps (a state carried without `.detach()`,
`retain_graph=True`) met every skipped step's saved outputs since the last tracked one, and
charged them to itself: a `tanh` state of 512 B/step read K x 512 B at stride K, and a carried
LSTM state 39808 B/step instead of 35712 B at K = 3 (the two skipped steps' 1280 B outputs and
four 256 B h/c states met by `detach` in backward, the previous step's two h/c by `select` in
forward). Such a storage was allocated while the mode was off, at a step no one knows; with a
stride it is counted in no step's bytes (`UNSEEN_STEP`).
"""

from __future__ import annotations

import os
import sys
import threading
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .places import is_user_file

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_PROBE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The bundled op is library code: the line a user wants is the one that called it.
# The bundled scenarios stand for user code: their lines are the ones to report.
_SCENARIO_DIR = os.path.join(_PROBE_DIR, "scenarios") + os.sep
_CUDA_EXT_DIR = os.path.join(os.path.dirname(_PROBE_DIR.rstrip(os.sep)), "cuda_ext") + os.sep

# The step of a storage first met through an op that allocates nothing, while steps are skipped:
# it was made on a skipped step (or outside the dispatcher), so no tracked step owns its bytes.
UNSEEN_STEP = -1
# The step of a storage first met through such an op with every step tracked: it existed before
# the step (made before the run, or in an untracked warm-up step), so it is no step's new memory.
PRE_EXISTING = -2

# What a frame's file is to _user_line: the user's, an installed library's or the standard
# library's (a fallback when no user frame is on the stack), or torch's and the probe's (never).
_USER, _LIBRARY, _HIDDEN = 0, 1, 2


def _hidden_dirs() -> tuple[str, ...]:
    """Torch's, the probe's and the bundled op's folders: never a created-at line (places.py
    tells the user's files from other libraries')."""
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


_allocation_free: dict[object, bool] = {}


def _allocates_nothing(func) -> bool:
    """Whether the op's outputs alias its inputs (a `Tensor(a)` return in its schema): a view,
    `detach`, an in-place or `out=` op. Not `lift_fresh`, nor an op taking a Storage (`set_`):
    that is how data made outside the dispatcher (`torch.tensor`, `torch.from_numpy`, a loaded
    storage) enters it, so the storage is new to this step. Cached per op: asked on new storages."""
    known = _allocation_free.get(func)
    if known is None:
        try:
            schema = func._schema
            known = (any(r.alias_info is not None for r in schema.returns)
                     and schema.name != "aten::lift_fresh"
                     and not any(str(a.type) == "Storage" for a in schema.arguments))
        except AttributeError:  # not an OpOverload: count what it returns, as before
            known = False
        _allocation_free[func] = known
    return known


class StorageRecord(weakref.ref):
    """A weakref to one storage that carries what the report needs about it; call it for the storage.

    One object per storage instead of a dataclass plus a weakref plus a callback closure: about
    2 us less per new storage, which the probe pays on every op that allocates.
    """

    __slots__ = ("key", "nbytes", "step", "op", "file", "line")
    key: int
    nbytes: int
    step: int  # the step that created it (0 = before the first step, UNSEEN_STEP: a skipped one)
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
        # Set while some steps run without the mode: a storage first met through an op that
        # allocates nothing is then a skipped step's (UNSEEN_STEP); with every step tracked it
        # existed before the step (PRE_EXISTING). Neither is charged to the step that meets it.
        self.skipping = False
        # Tensor objects made while tracking, to find held graphs and the holders of survivors.
        # A dict of plain weakrefs by id, not a WeakSet: adding to a WeakSet hashes the tensor
        # through Tensor.__hash__ in Python, about 5 us an op (cProfile, clean scenario). A reused
        # id only replaces a dead entry; dead ones are dropped every few steps.
        self._tensors: dict[int, weakref.ref] = {}
        self._hidden_dirs, self._user_dirs = (*_hidden_dirs(), "<frozen"), (_SCENARIO_DIR,)
        self._freed = _freed_callback(weakref.ref(self))
        self._where: dict[str, int] = {}  # file name -> _USER, _LIBRARY or _HIDDEN
        self._driver = threading.get_ident()  # the thread that runs the steps (see _user_line)

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
            if _allocates_nothing(func):
                self._note_base(t)
            return
        record = StorageRecord(st, self._freed)
        record.key = key
        record.op = getattr(func, "__name__", None) or str(func)
        self.records[key] = record
        if _allocates_nothing(func):
            # First met through an op that allocates nothing: the storage was made outside the
            # tracker (before the run: a dataset built at import, a cache filled then; or on a
            # skipped step). Charging it to the step that first reads it took `DATASET[i]` for
            # 6 KiB/step of new memory. Kept with no bytes, so later views of it are not taken
            # for new storages either. (Other threads' ops are recorded where they run: threads.py.)
            self._note_base(t)
            record.nbytes, record.step, record.file, record.line = 0, UNSEEN_STEP if self.skipping else PRE_EXISTING, "", 0
            return
        record.nbytes = nbytes = st.nbytes()
        record.step = self.step
        record.file, record.line = self._user_line()
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes

    def _note_base(self, view: torch.Tensor) -> None:
        """A view's base joins the tensors whose graphs are counted: a buffer made before the run
        and written in place through a view (`self.protos[c] = f` in forward) is never an op's
        output itself, yet its grad_fn (CopySlices) chains every step's graph."""
        base = view._base
        if base is not None and id(base) not in self._tensors:
            self._tensors[id(base)] = weakref.ref(base)

    def _user_line(self) -> tuple[str, int]:
        """The innermost frame in the user's own files (places.is_user_file), torch's and the
        probe's never: the line the user can change. A tensor made inside an installed library
        (transformers' GPT-2 `mm`, a Trainer's `clone`) is charged to the user's line that called
        into it (their `compute_loss` override calling `super().compute_loss`), not to the
        library's line. With no user frame on the stack, the innermost library frame."""
        try:
            frame = sys._getframe(3)
        except ValueError:
            # No Python frame called the op: autograd's engine ran it on a thread of its own, with
            # the mode's state copied there. CUDA backward runs on such a device thread (every
            # step failed with "call stack is not deep enough" on an H200, torch 2.11), while
            # the driving thread waits in `loss.backward()`: its line is the one to charge, as
            # on CPU, where backward runs on the driving thread itself.
            frame = sys._current_frames().get(self._driver)
        where = self._where
        fallback = None
        while frame is not None:
            filename = frame.f_code.co_filename
            kind = where.get(filename)
            if kind is None:
                kind = where[filename] = self._place(filename)
            if kind == _USER:
                return filename, frame.f_lineno
            if kind == _LIBRARY and fallback is None:
                fallback = (filename, frame.f_lineno)
            frame = frame.f_back
        return fallback or ("?", 0)

    def _place(self, filename: str) -> int:
        if filename.startswith(self._user_dirs):
            return _USER
        if filename.startswith(self._hidden_dirs):
            return _HIDDEN
        return _USER if is_user_file(filename) else _LIBRARY

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


def record_outputs(tracker: LiveStorageTracker, out, func) -> None:
    """Record an op's output tensors into `tracker`: for another thread's mode (threads.py)."""
    if isinstance(out, torch.Tensor):
        tracker._record(out, func)
        return
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor):
            tracker._record(t, func)
