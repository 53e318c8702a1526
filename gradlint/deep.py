"""Run libcst and the analysis on a thread whose stack fits any file gradlint reads.

libcst nests what CPython keeps flat: `a and b and ... and z` is one `BoolOp` for CPython and a
chain of `BooleanOperation` nodes, one per term, for libcst. Its native parser, its tree building
and every walk over the tree then recurse once per term. On the main thread's 8 MiB stack that
ended in SIGSEGV at about 10,000 terms (a 60 KB file CPython compiles), and Python's default
recursion limit turned 2,000 terms into a false "too deeply nested" GL001 (measured on libcst
1.9, Python 3.11).

Measured on this design: about 1 KiB of C stack per level of such a chain (20,000 terms need
16-32 MiB, 50,000 need 32-64 MiB), and a 1 MiB file of `and` terms (170,000 of them, the deepest
tree the default max-file-size admits) checks in 28 s on a 512 MiB stack with a limit of 10**6.
The thread below gets a 1 GiB stack: address space only, pages are touched as deep as a file goes.
The recursion limit keeps Python's own guard in front of the C stack: a million frames in 1 GiB is
1 KiB each, more than any frame measured here, so a deeper file (max-file-size raised) ends in a
RecursionError, which the engine reports as GL001, never in a crash.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from typing import Callable, TypeVar

STACK_BYTES = 1 << 30
RECURSION_LIMIT = 1_000_000
# libcst's native parser is not bounded by Python's limit: its depth is bounded by the text alone.
# A level of `a or b or ...` takes 5 bytes of source and about 1 KiB of stack (50,000 terms crash
# in 32 MiB and parse in 64 MiB), so 512 bytes of stack per byte of source is twice what the
# shallowest chain needs: a 2 MiB file fits the shared thread; a larger one (max-file-size raised)
# gets a thread of its own sized to it, or is refused when no such stack can be had.
STACK_PER_SOURCE_BYTE = 512

T = TypeVar("T")

_lock = threading.Lock()
_jobs: "queue.SimpleQueue[tuple[Callable[[], object], list]] | None" = None
_owner_pid = -1  # a forked pool worker has the module state but not the thread
_stack_bytes = STACK_BYTES  # what the shared thread got
# The main thread's own 8 MiB, for when no thread starts at all: only files this small fit it.
_CALLER_STACK_BYTES = 8 << 20
_THREAD_NAME = "gradlint-deep-stack"


def _serve(jobs: "queue.SimpleQueue[tuple[Callable[[], object], list]]", limit: int = RECURSION_LIMIT,
           once: bool = False) -> None:
    while True:
        job, box = jobs.get()
        # The limit is the interpreter's, not the thread's: it is raised only while a job runs, and
        # the caller waits for the job meanwhile, so no 8 MiB thread recurses under it.
        previous = sys.getrecursionlimit()
        sys.setrecursionlimit(max(previous, limit))
        try:
            box.append((True, job()))
        except BaseException as error:  # noqa: BLE001 - handed back to the caller, raised there
            box.append((False, error))
        finally:
            sys.setrecursionlimit(previous)
            box[0].set()
        if once:
            return


def _start() -> "queue.SimpleQueue | None":
    global _jobs, _owner_pid, _stack_bytes
    if _jobs is not None and _owner_pid == os.getpid():
        return _jobs
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    previous = threading.stack_size()
    try:
        # A strict overcommit policy or a 32-bit build may refuse 1 GiB of address space: take
        # the largest that starts, and let call() send what does not fit it elsewhere.
        for size in (STACK_BYTES, STACK_BYTES // 4, STACK_BYTES // 16):
            try:
                threading.stack_size(size)
                thread = threading.Thread(target=_serve, args=(jobs, RECURSION_LIMIT * size // STACK_BYTES),
                                          name=_THREAD_NAME, daemon=True)
                thread.start()
            except (RuntimeError, ValueError, MemoryError):
                continue
            _jobs, _owner_pid, _stack_bytes = jobs, os.getpid(), size
            return jobs
    finally:
        threading.stack_size(previous)
    _stack_bytes = 0
    return None


class NoStack(Exception):
    """No thread with a stack deep enough for this much source could be started."""


def call(function: Callable[[], T], source_bytes: int = 0) -> T:
    """`function()` on a thread whose stack fits `source_bytes` of source nested as deep as it can
    be; its exception, if any, is raised here."""
    if threading.current_thread().name.startswith(_THREAD_NAME):
        return function()  # already there (a fix round re-lints from inside a job)
    need = source_bytes * STACK_PER_SOURCE_BYTE
    with _lock:
        jobs = _start()
        if jobs is None or need > _stack_bytes:
            shared = False
        else:
            shared = True
            done = threading.Event()
            box: list = [done]
            jobs.put((function, box))
            _wait(done)
    if shared:
        return _unbox(box)
    try:
        return _call_alone(function, need)
    except NoStack:
        if need <= _CALLER_STACK_BYTES // 2:
            return function()
        raise


def _wait(done: threading.Event) -> None:
    """Wait for the job even through Ctrl-C, then raise the interrupt: an interpreter that shuts
    down while the thread is inside libcst's native parser aborts (SIGABRT, seen). The parse was
    as uninterruptible when it ran on the main thread."""
    interrupted: BaseException | None = None
    while not done.is_set():
        try:
            done.wait()
        except BaseException as error:  # noqa: BLE001 - re-raised once the job is over
            interrupted = interrupted or error
    if interrupted is not None:
        raise interrupted


def _unbox(box: list):
    ok, value = box[1]
    if ok:
        return value
    raise value


def _call_alone(function: Callable[[], T], need: int) -> T:
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    done = threading.Event()
    box: list = [done]
    jobs.put((function, box))
    with _lock:  # stack_size and the recursion limit are process-wide
        previous = threading.stack_size()
        try:
            threading.stack_size(need)
            thread = threading.Thread(target=_serve, args=(jobs, need // STACK_BYTES * RECURSION_LIMIT, True),
                                      name=_THREAD_NAME + "-alone", daemon=True)
            thread.start()
        except (RuntimeError, ValueError, MemoryError, OverflowError):
            raise NoStack(f"{-(-need >> 30)} GiB of stack") from None
        finally:
            threading.stack_size(previous)
        _wait(done)
        thread.join()
    return _unbox(box)
