"""Which steps run under the tracker: every step, or one in K when the tracker would dominate.

The tracker costs a fixed amount per aten op (the dispatch mode's Python call plus the bookkeeping:
about 10-18 us on this project's 2-core VM), so on a step of many small ops it more than doubles
the step time. A leak repeats every step, so tracking one step in K still measures it exactly per
tracked step: the growth is normalised by tracked steps, not by all steps. Warm-up is tracked
(lazy state made then is part of the baseline) but for the untracked steps of the timing blocks,
and so are the steps before each collection and the last two, so every graph count sees the
newest tensors.

With `track_every=None` the stride comes from timing the step with and without the tracker in the
last warm-up steps, in blocks of three untracked steps and a tracked one. A tracked step also slows
the untracked steps after it: on the bench's 0.25 ms step (bench/probe_script_overhead.py) by
+75 us, +45 us and +10 us on the next three (an empty TorchDispatchMode does it too, and one op
under it costs the next step 10 us: likely the caches its work evicted). So a tracked step's cost
is its excess over an untracked step plus that hangover on the next two, against a reference
step three after a tracked one. Timed alternating, as before, every untracked step carried the
hangover: the reference read 0.32 ms instead of 0.27 and the cost 0.46 ms instead of 0.60, so the
stride came out 5-6 where 8 or more was needed (script mode 1.57-1.69x on that step).

A leak that happens only on some steps (every 10th, say) is measured on the tracked steps it lands
on; which step of each block of K is tracked moves from block to block, so a leak that repeats
every few steps is sampled on all its phases (`track_every=1` stays the exact setting for
irregular leaks). With a chosen stride, once a collection sees growth (a tracked step's storage
alive two or more steps on, a cycle freed, more graph nodes held: runner._growth_seen) every step
is tracked from the next one on (`densify`), while MIN_JUDGED steps are left after settling: a
clean run keeps the stride and its low overhead, a leaking one is measured on every step from
there and judged on those steps, after DENSE_SETTLE of them (decide.judged): what the tracked
steps alone held before is not comparable with what every step holds (epoch losses kept for 6
steps read 43 B/step "retained" judged over the whole run). Tracking fewer steps alone missed
more of the leaks that land on some steps only: of 50 leaks every 2-16 steps on the bench's
small step (a 1 KiB tensor kept, each phase), 200 steps found 39-40 at K = 5-6 (as before this
calibration) and 15 at K = 10-11; with `densify` 38-39 at K = 10-11, and 41 at 100 steps (K = 5,
20 before), 46 at 400 (44 before).

A skipped step's storages a tracked step meets later through a view or `detach` (backward through
a graph chained across steps does) are charged to no step: see tracker.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Track sparsely only when that brings what tracking costs (its hangover included) under this
# fraction of an untracked step. The goal is 1.5x the bare step (issue 18, script mode); the rest
# is for what every step under the probe pays, tracked or not, which warm-up cannot time apart
# from the step: the boundaries (an untracked step 1.04x the bare one), the collections after
# tracked steps (64 us each, 1.03x at K = 8), a tracked step's hangover past the second step after
# it, and a machine shared with other work. On the bench's 0.25 ms step (thread CPU time,
# bench/probe_script_overhead.py, 200 steps): at 1.3 the stride came out 7-8 and the step
# 1.44-1.51x, at 1.25 8-10 and 1.38-1.51x with the other core busy, at 1.2 11 and 1.35-1.36x.
TARGET_OVERHEAD = 1.2
# Never fewer tracked steps after warm-up than this: the slope and the spread need points, and a
# leak that lands on some steps only needs tracked steps to land on. At the CLI's 100 steps it caps
# the stride at 5 where calibration wants 10 or more, and script mode reads 1.6-1.7x on the bench's
# small step; at 11 (stride 8) about 1.5x, but bench/probe_irregular_recall.py (50 leaks every
# 2-16 steps, two seeds) found 49 of 100 instead of 63; every step tracked finds 50 of 50.
MIN_TRACKED = 16
# After the stride gives way to every step (densify), the steps that settle like a warm-up before
# the run is judged on the rest (decide.judged): a buffer that holds a few steps' tensors held
# only the tracked steps' ones before and fills with every step's then, which read as growth.
DENSE_SETTLE = 10
# The fewest steps left after those for the stride to give way: judged on fewer, a buffer that
# fills and a leak look alike.
MIN_JUDGED = 30
# The timing blocks at the end of warm-up: each is three untracked steps, then a tracked one.
CALIBRATION_BLOCK = 4
MAX_CALIBRATION_BLOCKS = 4
# The shortest warm-up that is timed (two tracked steps, then a block); shorter: every step tracked.
MIN_CALIBRATED_WARMUP = 8


def calibration_steps(warmup: int) -> int:
    """How many of the last warm-up steps are timed blocks: as many as fit after the first two
    (tracked: the script's set-up and the first lazy state), at most MAX_CALIBRATION_BLOCKS."""
    if warmup < MIN_CALIBRATED_WARMUP:
        return 0
    return CALIBRATION_BLOCK * min(MAX_CALIBRATION_BLOCKS, (warmup - 2) // CALIBRATION_BLOCK)


@dataclass
class StridePlan:
    steps: int
    warmup: int
    track_every: int | None  # None: choose after warm-up
    every: int = 1
    interval: int = 1  # steps between collections after warm-up: a multiple of `every`
    dense_from: int | None = None  # with a chosen stride: every step tracked from this one on (densify())
    dense_interval: int = 1  # steps between collections from `dense_from` on
    # Timed calibration steps by their distance to the next tracked step: 0 is the tracked one,
    # 3 the untracked one right after a tracked step, 1 the one three after it (the reference).
    _timed: dict[int, list[float]] = field(default_factory=dict)
    _cpu: dict[int, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.track_every is not None:
            self.every = max(1, self.track_every)
        self._calibration = 0 if self.track_every is not None else calibration_steps(self.warmup)

    def _calibrating(self, i: int) -> bool:
        return self.warmup - self._calibration < i <= self.warmup

    def calibrating(self, i: int) -> bool:
        """Whether step i is timed to choose the stride."""
        return self._calibrating(i)

    def tracked(self, i: int) -> bool:
        if i <= self.warmup:
            # In the timing blocks one step in CALIBRATION_BLOCK, the last of each. The last
            # warm-up step is one, so the baseline collection sees the newest tensors.
            return not self._calibrating(i) or (self.warmup - i) % CALIBRATION_BLOCK == 0
        if i > self.steps - 2 or (self.dense_from is not None and i >= self.dense_from):
            return True
        block, position = divmod(i - self.warmup - 1, self.every)
        return position == _position(block, self.every)

    def may_densify(self, i: int) -> bool:
        """Whether every step could be tracked from step i on: the stride was chosen, not asked
        for, and after DENSE_SETTLE steps at least MIN_JUDGED are left to judge."""
        return (self.track_every is None and self.every > 1 and self.dense_from is None
                and self.steps - (i - 1 + DENSE_SETTLE) >= MIN_JUDGED)

    def densify(self, i: int) -> None:
        """Track every step from step i on: a collection saw growth (runner._growth_seen). The
        collections come as often as before, or so that the steps judged get at least six (a
        bounded cache is told from a leak by the level it stays at, on five or more)."""
        if self.may_densify(i):
            self.dense_from = i
            self.dense_interval = max(1, min(self.interval, (self.steps - (i - 1 + DENSE_SETTLE)) // 6))

    def collects(self, i: int) -> bool:
        """Whether a collection follows step i (after warm-up): one per `interval` steps, right
        after the tracked step of the interval's last block, so it sees that step's tensors."""
        if i <= self.warmup or i >= self.steps:
            return False
        if self.dense_from is not None and i >= self.dense_from:
            return (i - self.dense_from + 1) % self.dense_interval == 0
        block, position = divmod(i - self.warmup - 1, self.every)
        # The block's own tracked step, not one of the last two (tracked whatever their position).
        return position == _position(block, self.every) and (block + 1) % max(1, self.interval // self.every) == 0

    def observe(self, i: int, tracked: bool, seconds: float, cpu_seconds: float | None = None) -> None:
        if self._calibrating(i):
            distance = (self.warmup - i) % CALIBRATION_BLOCK
            self._timed.setdefault(distance, []).append(seconds)
            if cpu_seconds is not None:
                self._cpu.setdefault(distance, []).append(cpu_seconds)

    def _calibrated(self) -> bool:
        return len(self._timed) == CALIBRATION_BLOCK

    def _ratio(self) -> float:
        """How many untracked steps' time one tracked step costs, its hangover included: (the
        tracked step + the excess of the two untracked steps after it over the reference) over
        the reference, an untracked step three after a tracked one; the fastest sample of each.

        The larger of the wall-clock and the driving thread's CPU-time ratios. On a loaded
        machine the wall clock of a 1 ms step is mostly time spent waiting for a core (bare steps
        read 1 ms and 10 ms in one run, measured with other processes on both cores), which hid
        the tracker's cost (2.2x by wall clock, 5.8x by CPU time) and left every step tracked;
        the CPU time is the tracker's own work. Where the step waits on a device or other
        threads, its wall clock says more: the larger wins, so the stride is never chosen too small."""
        ratios = [_cost(self._timed)]
        if len(self._cpu) == CALIBRATION_BLOCK:
            ratios.append(_cost(self._cpu))
        return max(ratios)

    def decide(self, collect_every: int) -> int:
        """Fix the stride after warm-up; return the collection interval, a multiple of it."""
        measured = self.steps - self.warmup
        if self.track_every is None and self._calibrated():
            ratio = self._ratio()
            # Rounded first: 2 / (1.2 - 1) is 10.000000000000002 in floats, and 10 steps, not 11.
            wanted = math.ceil(round((ratio - 1) / (TARGET_OVERHEAD - 1), 9)) if ratio > TARGET_OVERHEAD else 1
            self.every = max(1, min(wanted, (measured - 2) // MIN_TRACKED))
        # At least four collections after warm-up: a growing graph is judged on the collected series.
        interval = max(1, min(collect_every, measured // 4))
        self.interval = max(self.every, interval // self.every * self.every)
        return self.interval


def _cost(timed: dict[int, list[float]]) -> float:
    """(tracked + right after + two after - 2 x reference) / reference, each the fastest of its
    samples: waiting for a core or a preempted step only ever adds time, and with two samples a
    position a median is their mean (one stretched 54 ms step among them read 1.75x, K = 4)."""
    fastest = {distance: min(times) for distance, times in timed.items()}
    reference = max(1e-9, fastest[1])
    # Distance 3: right after a tracked step; 2: the one after that.
    return (fastest[0] + fastest[3] + fastest[2] - 2 * reference) / reference


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
