"""Progress on a terminal: steps done, elapsed time, live tensor bytes, redrawn in place on stderr.

Quiet when stderr is not a terminal (a batch log, a pipe, CI) or with --quiet: a log gets the
report, not a hundred carriage returns. Importing this module must not import torch.
"""

from __future__ import annotations

import sys
import time

# Redrawn at most this often: a fast step loop would otherwise spend its time writing to the terminal.
REDRAW_S = 0.1


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
    """`update(done, live_bytes)` after each step; `close()` clears the line."""

    def __init__(self, total: int, label: str = "probing", stream=None, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and _isatty(self.stream)
        self.total, self.label = total, label
        self.start = time.monotonic()
        self._drawn = 0.0
        self._width = 0

    def update(self, done: int, live_bytes: float | None = None) -> None:
        if not self.enabled:
            return
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
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
