"""Which steps run under the tracker: every step, or one in K when the tracker would dominate.

The tracker costs a fixed amount per aten op (the dispatch mode's Python call plus the bookkeeping:
about 10-18 us on this project's 2-core VM), so on a step of many small ops it more than doubles
the step time. A leak repeats every step, so tracking one step in K still measures it exactly per
tracked step: the growth is normalised by tracked steps, not by all steps. Warm-up is tracked
(lazy state made then is part of the baseline), and so are the steps before each collection and
the last two, so every graph count sees the newest tensors.

With `track_every=None` the stride comes from timing the step with and without the tracker in the
last warm-up steps. A leak that happens only on some steps (every 10th, say) is measured on the
tracked steps it lands on; which step of each block of K is tracked moves from block to block, so
a leak that repeats every few steps is sampled on all its phases (`track_every=1` stays the exact
setting for irregular leaks). A skipped step's
storages a tracked step meets later through a view or `detach` (backward through a graph chained
across steps does) are charged to no step: see tracker.py.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

# Track sparsely only when that brings the mean step time under the probe below this multiple of
# the bare step. The goal is 1.5x (issue 18, script mode); the formula counts the tracked steps'
# cost only, and an untracked step still pays the step boundaries and the collections (1.15x on
# a 1 ms step, measured in thread CPU time by bench/probe_script_overhead.py): aiming at 1.5
# landed at 1.6-1.8x there, so it aims lower.
TARGET_OVERHEAD = 1.3
# Never fewer tracked steps after warm-up than this: the slope and the spread need points.
MIN_TRACKED = 16
CALIBRATION_STEPS = 6  # the last warm-up steps, alternating untracked and tracked


@dataclass
class StridePlan:
    steps: int
    warmup: int
    track_every: int | None  # None: choose after warm-up
    every: int = 1
    interval: int = 1  # steps between collections after warm-up: a multiple of `every`
    _timed: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})
    _cpu: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})

    def __post_init__(self) -> None:
        if self.track_every is not None:
            self.every = max(1, self.track_every)

    def _calibrating(self, i: int) -> bool:
        return (self.track_every is None and self.warmup >= CALIBRATION_STEPS + 2
                and self.warmup - CALIBRATION_STEPS < i <= self.warmup)

    def calibrating(self, i: int) -> bool:
        """Whether step i is timed to choose the stride."""
        return self._calibrating(i)

    def tracked(self, i: int) -> bool:
        if i <= self.warmup:
            # Odd distance from the end of warm-up: untracked. The last warm-up step is tracked,
            # so the baseline collection sees the newest tensors.
            return not (self._calibrating(i) and (self.warmup - i) % 2 == 1)
        if i > self.steps - 2:
            return True
        block, position = divmod(i - self.warmup - 1, self.every)
        return position == _position(block, self.every)

    def collects(self, i: int) -> bool:
        """Whether a collection follows step i (after warm-up): one per `interval` steps, right
        after the tracked step of the interval's last block, so it sees that step's tensors."""
        if i <= self.warmup or i >= self.steps:
            return False
        block, position = divmod(i - self.warmup - 1, self.every)
        # The block's own tracked step, not one of the last two (tracked whatever their position).
        return position == _position(block, self.every) and (block + 1) % max(1, self.interval // self.every) == 0

    def observe(self, i: int, tracked: bool, seconds: float, cpu_seconds: float | None = None) -> None:
        if self._calibrating(i):
            self._timed[tracked].append(seconds)
            if cpu_seconds is not None:
                self._cpu[tracked].append(cpu_seconds)

    def _ratio(self) -> float:
        """How many times slower a tracked step is: the larger of the wall-clock and the driving
        thread's CPU-time ratios. On a loaded machine the wall clock of a 1 ms step is mostly
        time spent waiting for a core (bare steps read 1 ms and 10 ms in one run, measured with
        other processes on both cores), which hid the tracker's cost (2.2x by wall clock, 5.8x
        by CPU time) and left every step tracked; the CPU time is the tracker's own work. Where
        the step waits on a device or other threads, its wall clock says more: the larger wins,
        so the stride is never chosen too small."""
        wall = statistics.median(self._timed[True]) / max(1e-9, statistics.median(self._timed[False]))
        if self._cpu[True] and self._cpu[False]:
            cpu = statistics.median(self._cpu[True]) / max(1e-9, statistics.median(self._cpu[False]))
            return max(wall, cpu)
        return wall

    def decide(self, collect_every: int) -> int:
        """Fix the stride after warm-up; return the collection interval, a multiple of it."""
        measured = self.steps - self.warmup
        if self.track_every is None and self._timed[True] and self._timed[False]:
            ratio = self._ratio()
            wanted = math.ceil((ratio - 1) / (TARGET_OVERHEAD - 1)) if ratio > TARGET_OVERHEAD else 1
            self.every = max(1, min(wanted, (measured - 2) // MIN_TRACKED))
        # At least four collections after warm-up: a growing graph is judged on the collected series.
        interval = max(1, min(collect_every, measured // 4))
        self.interval = max(self.every, interval // self.every * self.every)
        return self.interval


# The golden ratio's fractional part: the Weyl sequence frac(b * phi) spreads the tracked step's
# position over its block as evenly as any sequence can, without repeating.
_PHI = 0.6180339887498949


def _position(block: int, every: int) -> int:
    """Which step of a block of `every` is tracked: it moves from block to block, not always the last.
    A fixed phase aliases with a leak that repeats every few steps: with one step in 3 tracked, a
    leak every third step read 3x its rate on one phase and nothing on the other two (measured).
    Over 68 steps, strides 2-5 and leaks every 2-10 steps, the worst rate read is off by 4.4x with
    a fixed phase, 2.7x with a hashed one, 1.15x with this sequence (simulated on every phase)."""
    return int((block + 1) * _PHI % 1.0 * every) if every > 1 else 0
