"""Tensors made on other threads: a prefetching producer, a logging thread, a pin-memory thread.

A TorchDispatchMode is per thread (torch keeps the mode stack in thread-local state: an op on a
thread that did not push the mode never reaches it, measured on torch 2.13), so the tracker on the
thread that drives the steps sees nothing another thread makes, and a producer thread keeping
every batch read "clean" with every step tracked. Threads started once `install()` ran (the CLI
calls it before it imports the user's module or runs the script) run their whole body with a
small mode of their own pushed, which records into the tracker of the run in progress, charged
to the step under way on the driving thread.

The mode is pushed with torch's `_push_mode`, not `__enter__`: `__enter__` also saves and restores
a process-wide "in a dispatch mode" flag, and a thread's enter and exit interleaved with the
tracker's would leave that flag wrong for the main thread. Threads already running when
`install()` ran cannot be reached (no API pushes a mode onto another thread's state): the report
says how many there were.
"""

from __future__ import annotations

import threading

_installed = False
_original_bootstrap = None
_tracker = None  # the LiveStorageTracker of the run in progress, or None
_tracking = False  # whether the driving thread's current step is tracked
_before: set[int] = set()  # idents of threads alive when install() ran, other than the caller


def install() -> None:
    """From now on every new thread's ops reach the run in progress (none: they pass through)."""
    global _installed, _original_bootstrap
    if _installed:
        return
    _installed = True
    me = threading.get_ident()
    _before.update(t.ident for t in threading.enumerate() if t.ident is not None and t.ident != me)
    _original_bootstrap = threading.Thread._bootstrap_inner

    def _bootstrap_inner(self):
        mode = _thread_mode()
        if mode is None:
            return _original_bootstrap(self)
        from torch.utils._python_dispatch import _pop_mode, _push_mode

        _push_mode(mode)
        try:
            return _original_bootstrap(self)
        finally:
            try:
                _pop_mode()
            except (RuntimeError, AssertionError, IndexError):
                pass  # the thread's own code popped modes it did not push

    threading.Thread._bootstrap_inner = _bootstrap_inner


def _thread_mode():
    try:
        import torch  # noqa: F401 - a thread started before torch is ever imported has nothing to track
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None
    return _ThreadMode.make(TorchDispatchMode)


class _ThreadMode:
    _cls = None

    @classmethod
    def make(cls, base):
        if cls._cls is None:
            from .tracker import record_outputs

            class ThreadRecorder(base):
                """Passes every op through; records its outputs into the run in progress, if any."""

                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    out = func(*args, **(kwargs or {}))
                    tracker = _tracker
                    if tracker is not None and (_tracking or not tracker.skipping):
                        record_outputs(tracker, out, func)
                    return out

            cls._cls = ThreadRecorder
        return cls._cls()


def watch(tracker) -> None:
    global _tracker
    _tracker = tracker


def unwatch(tracker) -> None:
    global _tracker, _tracking
    if _tracker is tracker:
        _tracker, _tracking = None, False


def tracking(on: bool) -> None:
    global _tracking
    _tracking = on


def unreachable_threads() -> int:
    """Other threads alive now whose ops the run could not see: started before install(), or
    any other thread when it never ran."""
    me = threading.get_ident()
    others = [t for t in threading.enumerate() if t.ident not in (None, me) and t.is_alive()]
    return sum(1 for t in others if not _installed or t.ident in _before)
