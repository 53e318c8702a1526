"""Stop signals: SIGTERM (a batch scheduler's time limit, `timeout`) stops a run the way Ctrl-C does.

The handler raises `Stopped`, a KeyboardInterrupt, where Python delivers the signal: the runner
already ends the run on a KeyboardInterrupt and reports what it measured, and a step's own
`except Exception` does not swallow it. Importing this module must not import torch (the CLI
imports it at start-up).
"""

from __future__ import annotations

import contextlib
import signal
import threading

# The signal whose Stopped was raised, until the next `handling()`. Python runs a handler wherever
# the main thread is, also inside a weakref callback (the tracker's, on every freed storage), and
# an exception raised there is printed as "ignored" and lost; a step may also catch it and go on.
# The runner reads this after each step, so the run still ends at the step the signal came in.
pending: int | None = None


class Stopped(KeyboardInterrupt):
    """A stop signal, raised where it arrived."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_name(stop: BaseException) -> str:
    """"SIGTERM" for a signal, "" for a KeyboardInterrupt raised by code."""
    return signal.Signals(stop.signum).name if isinstance(stop, Stopped) else ""


def exit_code(name: str) -> int:
    """The shell's code for a process a signal ended: 128 + the signal number (Ctrl-C: 130)."""
    return 128 + (signal.Signals[name].value if name else signal.SIGINT.value)


def describe(name: str) -> str:
    return f"interrupted by {name}" if name else "interrupted"


def check() -> None:
    """Raise again a stop whose first Stopped was lost or caught."""
    if pending is not None:
        raise Stopped(pending)


def _raise(signum, _frame) -> None:
    global pending
    pending = signum
    raise Stopped(signum)


@contextlib.contextmanager
def handling():
    """SIGTERM, and SIGINT where Python's own handler has it, raise Stopped while the block runs.

    A SIGINT the parent set to be ignored (a job started with `&` by a script) stays ignored, and
    the handlers before are restored after: the API and the tests run the command in-process.
    """
    global pending
    pending = None
    if threading.current_thread() is not threading.main_thread():
        yield  # signal.signal works only in the main thread, and signals go there anyway
        return
    before = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        current = signal.getsignal(signum)
        if signum == signal.SIGINT and current is not signal.default_int_handler:
            continue
        if signum == signal.SIGTERM and current not in (signal.SIG_DFL, None):
            continue  # someone wrapping the probe handles it their own way
        before[signum] = current
        signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        pending = None
