"""From the measured series to a verdict: clean, delayed-free, retained or error.

The tracker is exact, so clean code shows no growth at all after collection; the thresholds only
have to ignore one-off events (an optimizer's state made on its first step, a cache overwritten
each step that holds the last step's tensor) and not a noise floor.
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass


class Verdict(enum.Enum):
    CLEAN = "clean"
    DELAYED_FREE = "delayed-free"  # a reference cycle: grows between collections, gc.collect() frees it
    RETAINED = "retained"  # survives gc.collect(): reachable, or a cycle through C++ gc cannot see
    # CUDA: the caching allocator's reserved blocks grew while allocated memory did not; not a leak.
    ALLOCATOR_GREW = "allocator-grew"
    ERROR = "error"  # the step raised
    # Too few steps after warm-up to judge (a script that ended or stopped early, finish() called
    # early): neither clean nor a leak.
    NOT_MEASURED = "not-measured"

    @property
    def is_leak(self) -> bool:
        return self in (Verdict.DELAYED_FREE, Verdict.RETAINED)

    @property
    def no_leak(self) -> bool:
        """Measured, and nothing grows that the program keeps."""
        return self in (Verdict.CLEAN, Verdict.ALLOCATOR_GREW)


# The most points a slope is taken over: the pairs grow with the square of the points.
MAX_SLOPE_POINTS = 200


def robust_slope(xs: list[float], ys: list[float]) -> float:
    """Theil-Sen: the median of pairwise slopes, unmoved by a few outliers (a one-off allocation).

    Over more than MAX_SLOPE_POINTS points (more collections than a 2000-step run makes at the
    default gc every 10), over that many evenly spaced ones, the first and last among them: all
    pairs of 500 collections (5000 steps) were 125k slopes, and deciding left the process 4.2 MB
    bigger (11.5 MB at 10000 steps), more than the run itself had grown."""
    n = len(xs)
    if n > MAX_SLOPE_POINTS:
        keep = [round(k * (n - 1) / (MAX_SLOPE_POINTS - 1)) for k in range(MAX_SLOPE_POINTS)]
        xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i])
              for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
    return statistics.median(slopes) if slopes else 0.0


@dataclass
class Spread:
    """How evenly the surviving storages' creation steps cover the measured steps."""

    steps_with_survivors: int
    measured_steps: int
    quarters_hit: int

    @property
    def steady(self) -> bool:
        # A leak of one tensor per step (or per few steps) leaves survivors in every quarter of
        # the run; a one-off (lazy state, a late cache fill) leaves them in one.
        return self.steps_with_survivors >= 3 and self.quarters_hit >= 3

    @property
    def confidence(self) -> float:
        """How sure the survivors show a leak rather than a one-off: by how many quarters of the
        run they cover and how many steps left them (four or more is full evidence). Not by their
        density: a leak every 7th step is as certain as one every step (it read 0.20-0.29)."""
        if self.measured_steps <= 0:
            return 0.0
        return round(min(1.0, self.quarters_hit / 4 * min(1.0, self.steps_with_survivors / 4)), 2)


def survivor_spread(survivor_steps: set[int], first: int, last: int, tracked: int | None = None) -> Spread:
    """Survivor creation steps within [first, last], of which `tracked` (default: all) were measured."""
    inside = {s for s in survivor_steps if first <= s <= last}
    n = last - first + 1
    if n <= 0:
        return Spread(0, 0, 0)
    quarters = {min(3, (s - first) * 4 // n) for s in inside}
    return Spread(len(inside), n if tracked is None else tracked, len(quarters))


def growing(values: list[int]) -> bool:
    """Made a new high at least three times, never fell below its first value, and ends near its
    high. Counting rises alone took a graph that comes and goes for growth: micro-batch losses
    kept for one backward every 4 steps read 0, 4, 8, 4, 8 nodes at the collections (three rises),
    a false "retained" at several strides."""
    if len(values) < 3:
        return False
    highs, top = 0, values[0]
    for value in values[1:]:
        if value > top:
            highs, top = highs + 1, value
    return (highs >= min(3, len(values) - 1) and values[-1] > values[0] and values[-1] >= 0.75 * top
            and min(values) >= values[0])


def levelled_off(values: list[int], tracked: list[int] | None = None, gap: float = 1.0) -> int | None:
    """For a series that grew and then stopped making new highs, the index where it reached its
    level; else None. A bounded cache or buffer fills and stops (its survivors spread over the run
    like a leak's), a leak makes a new high at every collection. Stopped means: at or under its
    final level for its whole second half, or, for a buffer that filled late, at or under its peak
    for the last quarter of the collections (at least two after the peak).

    A leak that lands on one tracked step in `gap` (every 7th step, one step in 3 tracked) makes
    a new high only that often: the quiet stretch must also last three such gaps (`tracked`: the
    tracked steps counted at each collection)."""
    if len(values) < 5 or values[-1] <= values[0]:
        return None
    if values[-1] <= values[len(values) // 2]:
        found = next(i for i, v in enumerate(values) if v >= values[-1])
    else:
        peak = values.index(max(values))
        found = peak if len(values) - 1 - peak >= max(2, len(values) // 4) else None
    if found is not None and tracked is not None and tracked[-1] - tracked[found] < 3 * gap:
        return None
    return found


def leak_start(survivor_steps: set[int], first: int, last: int, tracked_since) -> int | None:
    """The step a leak began at, when from there on nearly every measured step left survivors:
    a leak that starts late in the run (after a schedule change, an unfreeze, a flag) has them in
    one or two quarters only, where a one-off (lazy state, one cache fill) has them in one step.
    `tracked_since(step)`: measured steps from `step` to `last`."""
    inside = sorted(s for s in survivor_steps if first <= s <= last)
    # The earliest start from which the survivors are dense: an early one-off (lazy state made on
    # step 12) must not hide a leak that began at step 60.
    found = None
    for count, start in enumerate(reversed(inside), 1):
        if count >= 3 and count >= 0.8 * tracked_since(start):
            found = start
    return found


def keeps_climbing(values: list[int]) -> bool:
    """Rose at every collection of this stretch, at least twice."""
    return len(values) >= 3 and all(b > a for a, b in zip(values, values[1:]))
