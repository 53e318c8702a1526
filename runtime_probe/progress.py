"""Progress on a terminal: steps done, elapsed time, live tensor bytes, redrawn in place on stderr.

Quiet when stderr is not a terminal (a batch log, a pipe, CI) or with --quiet: a log gets the
report, not a hundred carriage returns. Importing this module must not import torch.
"""

from __future__ import annotations

import sys
import threading
import time

# Redrawn at most this often: a fast step loop would otherwise spend its time writing to the terminal.
REDRAW_S = 0.1
# A set-up still running after this long (an import that loads data, a script's work before its
# first step) gets one line: with no step done there is no bar, and the terminal looks hung.
WAIT_NOTICE_S = 3


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _isatty(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # closed
        return False


class Progress:
    """`update(done, live_bytes)` after each step; `close()` clears the line. `waiting(what)` before
    a stretch with no steps: one line if it is still running after WAIT_NOTICE_S seconds."""

    def __init__(self, total: int, label: str = "probing", stream=None, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and _isatty(self.stream)
        self.total, self.label = total, label
        self.start = time.monotonic()
        self._drawn = 0.0
        self._width = 0
        self._notice: threading.Timer | None = None
        self._lock = threading.Lock()  # the notice is written from its timer's thread

    def waiting(self, what: str) -> None:
        """`what` ("importing train.py") starts now; the next update() or done_waiting() ends it."""
        self.done_waiting()
        if not self.enabled:
            return
        seconds = WAIT_NOTICE_S
        timer = threading.Timer(seconds, self._still_running, (what, seconds))
        timer.daemon = True  # never keeps the process
        self._notice = timer
        timer.start()

    def _still_running(self, what: str, seconds: float) -> None:
        with self._lock:
            if self._notice is not None:
                self.stream.write(f"gradlint probe: {what} (still running after {seconds:g} s)...\n")
                self.stream.flush()
                self._notice = None

    def done_waiting(self) -> None:
        with self._lock:
            if self._notice is not None:
                self._notice.cancel()
                self._notice = None

    def update(self, done: int, live_bytes: float | None = None) -> None:
        if not self.enabled:
            return
        if self._notice is not None:
            self.done_waiting()
        now = time.monotonic()
        if done < self.total and now - self._drawn < REDRAW_S:
            return
        self._drawn = now
        live = f", live tensors {human_bytes(live_bytes)}" if live_bytes is not None else ""
        text = f"{self.label}: step {done}/{self.total}, {now - self.start:.1f} s{live}"
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def close(self) -> None:
        self.done_waiting()
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
