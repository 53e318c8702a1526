"""`probe(step, steps=100)`: run a zero-argument training step and say whether memory leaks."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from . import signals
from .attribute import Holder
from .runner import Run, StepError, run_steps
from .target import runs_nothing
from .verdict import Verdict, growing, keeps_climbing, leak_start, levelled_off, robust_slope, survivor_spread


@dataclass
class ProbeReport:
    name: str
    verdict: Verdict
    reason: str  # one line: why this verdict
    bytes_per_step: float  # the leak's growth (retained: after collection; delayed-free: what collection freed)
    graph_nodes_per_step: float
    confidence: float  # 0..1
    steps_done: int
    steps_requested: int
    warmup: int
    gc_every: int
    track_every: int  # one step in this many after warm-up ran under the tracker
    device: str
    steps_to_oom: float | None
    step_peak_bytes: float  # median transient bytes a step allocates above its start
    median_step_ms: float
    tracked_step_ms: float  # median of the steps run under the tracker (all of them when K = 1)
    heap_bytes_per_step: float | None  # glibc mallinfo2 slope after collection (a second signal)
    # torch.cuda.memory_allocated() slope after collection, on CUDA only: the caching allocator's
    # view, in its rounded blocks, of every step (tracked or not).
    cuda_bytes_per_step: float | None = None
    holders: list[Holder] = field(default_factory=list)
    error: StepError | None = None
    # When a step failed: the verdict of the steps measured before it, and why; the growth, the
    # holders and the countdown above are theirs (a leak that ran the memory out is seen here).
    measured_verdict: Verdict | None = None
    measured_reason: str = ""
    interrupted: bool = False
    interrupted_by: str = ""  # the signal that stopped the run ("SIGTERM"); "" for a KeyboardInterrupt
    run: Run | None = field(default=None, repr=False)

    @property
    def is_leak(self) -> bool:
        return self.verdict.is_leak

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.CLEAN

    def to_dict(self) -> dict:
        from .report import report_dict

        return report_dict(self)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if signals.cuda_available() else "cpu"
    if device == "cuda" and not signals.cuda_available():
        raise ValueError("--device cuda: this torch has no usable CUDA device (torch.cuda.is_available() is False)")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: use auto, cpu or cuda")
    return device


def probe(step: Callable[[], object], steps: int = 100, *, warmup: int = 10, gc_every: int = 10,
          device: str = "auto", name: str | None = None, on_step: Callable[[int], None] | None = None,
          attribute: bool = True, track_every: int | None = None) -> ProbeReport:
    """Run `step` `steps` times (the first `warmup` unmeasured) and classify its memory growth.

    `track_every=None` tracks every step unless the tracker would more than double a small step;
    then one step in K (see stride.py). `track_every=1` tracks every step.
    """
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if track_every is not None and track_every < 1:
        raise ValueError("track_every must be at least 1")
    kind = runs_nothing(step)
    if kind is not None:
        raise ValueError(f"{getattr(step, '__qualname__', step)!s} is a {kind}: calling it runs "
                         "none of its body, so there is nothing to measure; probe a plain function")
    device = resolve_device(device)
    run = run_steps(step, steps, warmup, gc_every, on_step=on_step, attribute=attribute, track_every=track_every)
    return assess(run, name or getattr(step, "__qualname__", repr(step)), device)


def assess(run: Run, name: str, device: str) -> ProbeReport:
    peak = statistics.median(run.step_peak_bytes) if run.step_peak_bytes else 0.0
    step_ms = statistics.median(run.step_seconds) * 1000 if run.step_seconds else 0.0
    tracked_s = [s for s, on in zip(run.step_seconds[run.warmup:], run.step_tracked[run.warmup:]) if on]
    tracked_ms = statistics.median(tracked_s) * 1000 if tracked_s else step_ms
    common = dict(name=name, steps_done=run.steps_done, steps_requested=run.steps_requested, warmup=run.warmup,
                  gc_every=run.gc_every, track_every=run.track_every, device=device, step_peak_bytes=peak, median_step_ms=step_ms,
                  tracked_step_ms=tracked_ms,
                  error=run.error, interrupted=run.interrupted, interrupted_by=run.interrupted_by, run=run)
    if run.error is None:
        return _assess(run, device, common)
    return _failed(run.error, _assess(run, device, common) if run.steps_done > run.warmup else None, common)


def _failed(error: StepError, measured: ProbeReport | None, common: dict) -> ProbeReport:
    """The error verdict, over what the steps before the failed one measured (None: only warm-up ran)."""
    what = f"ran out of memory ({error.exception})" if error.out_of_memory else f"raised {error.exception}"
    reason = f"step {error.step} {what}"
    if measured is None:
        return ProbeReport(verdict=Verdict.ERROR, reason=reason, bytes_per_step=0.0, graph_nodes_per_step=0.0,
                           confidence=1.0, steps_to_oom=None, heap_bytes_per_step=None, **common)
    if error.out_of_memory and measured.verdict.is_leak:
        nodes = f" +{measured.graph_nodes_per_step:.1f} nodes/step" if measured.graph_nodes_per_step else ""
        reason += (f"; the steps before it leak {measured.bytes_per_step:.0f} B/step{nodes} "
                   f"({measured.verdict.value}): a likely cause")
    # Out of memory already, the countdown to it is moot.
    return replace(measured, verdict=Verdict.ERROR, reason=reason, confidence=1.0,
                   measured_verdict=measured.verdict, measured_reason=measured.reason,
                   steps_to_oom=None if error.out_of_memory else measured.steps_to_oom)


def _assess(run: Run, device: str, common: dict) -> ProbeReport:
    measured = run.steps_done - run.warmup
    # Bytes are counted on tracked steps only, so they are normalised by tracked steps.
    tracked = max(1, run.tracked_between(run.warmup, run.steps_done))
    after = [c for c in run.collections if c.step > run.warmup]
    series = [c for c in run.collections if c.step >= run.warmup]  # with the warm-up baseline
    heap = [(c.step, c.heap_bytes) for c in after if c.heap_bytes is not None]
    heap_slope = robust_slope([s for s, _ in heap], [h for _, h in heap]) if len(heap) >= 3 else None
    cuda = [(c.step, c.cuda_bytes) for c in after if c.cuda_bytes is not None] if device == "cuda" else []
    cuda_slope = robust_slope([s for s, _ in cuda], [b for _, b in cuda]) if len(cuda) >= 3 else None
    if measured < 4 or not after:
        return ProbeReport(verdict=Verdict.CLEAN, reason=f"too few measured steps ({measured}) to see growth",
                           bytes_per_step=0.0, graph_nodes_per_step=0.0, confidence=0.0, steps_to_oom=None,
                           heap_bytes_per_step=heap_slope, cuda_bytes_per_step=cuda_slope, **common)

    # Retained: storages from steady steps that survive the final collection. The last two steps
    # are left out: a cache overwritten each step (or a ctx attribute of the last graph) keeps them.
    last_counted = run.steps_done - 2
    spread = survivor_spread(run.survivor_steps, run.warmup + 1, last_counted,
                             run.tracked_between(run.warmup, last_counted))
    collected = [(c.tracked, c.live_after) for c in series]
    # Measured from the collection before the first step whose storages survive: a leak that
    # began late is measured at its rate, not averaged over the steps before it.
    start = leak_start(run.survivor_steps, run.warmup + 1, last_counted,
                       lambda s: run.tracked_between(s - 1, last_counted))
    since = max([i for i, c in enumerate(series) if start is not None and c.step < start] or [0])
    collected = collected[since:]
    slope = robust_slope([s for s, _ in collected], [b for _, b in collected]) if len(collected) >= 2 else 0.0
    retained_bytes = slope if slope > 0 else run.survivor_bytes / tracked
    # Began after the first collection past warm-up, and rose at every collection since: measured
    # from its start (a leak from step 40 of 80 still has survivors in three quarters of the run).
    late = (start is not None and since > 0
            and keeps_climbing([c.live_after for c in series[since:]]))
    if late:  # the windows' slope would count the steps of the first window before the start
        retained_bytes = ((series[-1].live_after - series[since].live_after)
                          / max(1, run.tracked_between(start - 1, series[-1].step)))
    nodes = [c.graph_nodes for c in series]
    # How many tracked steps apart the survivors' steps are: a sparse leak is quiet that long.
    # (A one-off fill has too few survivors to say.)
    gap = spread.measured_steps / spread.steps_with_survivors if spread.steps_with_survivors >= 3 else 1.0
    # With a stride the last two steps are always tracked, so the last collection sees more of a
    # bounded graph than the others (a list trimmed to its last 10 losses at K = 3: 0, 6, 8, 8,
    # ..., 8, 10 nodes, a third "new high"): growth is judged without it.
    graph_grows = growing(nodes if run.track_every == 1 else nodes[:-1])
    # Counted on tracked steps' nodes only (graph.sequence_mark), so per tracked step, like the bytes.
    node_slope = robust_slope([c.tracked for c in series], nodes) if graph_grows else 0.0
    # Delayed-free: each window's garbage (a cycle holding tensors) that gc.collect() reclaimed.
    reclaims = [c.live_before - c.live_after for c in after]
    reclaiming = sum(1 for r in reclaims if r > 0)
    delayed = reclaiming >= max(1, len(reclaims) // 2)

    level = levelled_off([c.live_after for c in series], [c.tracked for c in series], gap)
    # One tensor re-made bigger every step: no earlier step's storage survives, yet the live set
    # rises at every collection, by the same amount per step (measured on all steps: the newest
    # copy holds what every step, tracked or not, appended).
    regrown = (run.regrown and not spread.steady and not late and level is None and len(series) >= 5
               and keeps_climbing([c.live_after for c in series]))
    regrown_bytes = robust_slope([c.step for c in series], [c.live_after for c in series]) if regrown else 0.0

    holders: list[Holder] = []
    graph_reason = f"the autograd graph held by live tensors grows by {node_slope:.1f} nodes/step"
    if regrown and regrown_bytes > 0:
        verdict = Verdict.RETAINED
        holders = list(run.regrown_holders)
        for h in holders:
            h.bytes_per_step, h.verdict = regrown_bytes, "retained"
        bytes_per_step = regrown_bytes
        reason = (f"live tensors after collection rose at every one of the {len(series) - 1} collections, "
                  f"{regrown_bytes:.0f} B/step, though no earlier step's tensors survive: one tensor made "
                  "anew and bigger each step (torch.cat onto itself)")
        if graph_grows:  # cat of a graph-attached row: its graph chains too
            _add_graph_holders(holders, run.graph_holders, node_slope)
            reason += f"; {graph_reason}"
        confidence = 1.0
    elif (spread.steady or late) and retained_bytes > 0 and level is None or graph_grows:
        verdict = Verdict.RETAINED
        holders = list(run.retained_holders)
        if graph_grows:
            _add_graph_holders(holders, run.graph_holders, node_slope)
        what = []
        tracked_word = "tracked " if run.track_every > 1 else ""
        if late and retained_bytes > 0:
            since_start = sum(1 for s in run.survivor_steps if start <= s <= last_counted)
            # With a stride the leak began after the last tracked step that left nothing.
            before = max((i for i in range(run.warmup + 1, start) if run.step_tracked[i - 1]), default=start - 1)
            began = f"step {start}" if before == start - 1 else f"a step from {before + 1} to {start}"
            what.append(f"{retained_bytes:.0f} B/step survive gc.collect() since {began} (from "
                        f"{since_start} of the {run.tracked_between(start - 1, last_counted)} "
                        f"{tracked_word}steps since; none before): a leak that began late in the run")
        elif spread.steady and retained_bytes > 0:
            what.append(f"{retained_bytes:.0f} B/step survive gc.collect() (from {spread.steps_with_survivors} of {spread.measured_steps} "
                        f"{tracked_word}steps)")
        if graph_grows:
            what.append(graph_reason)
        reason = "; ".join(what)
        if late:
            since_start = sum(1 for s in run.survivor_steps if start <= s <= last_counted)
            confidence = round(min(1.0, since_start / max(1, run.tracked_between(start - 1, last_counted))), 2)
        else:
            confidence = spread.confidence if spread.steady else round(_up_fraction(nodes), 2)
        bytes_per_step = retained_bytes if spread.steady or late else max(0.0, retained_bytes)
    elif delayed:
        verdict = Verdict.DELAYED_FREE
        holders = list(run.reclaimed_holders)
        bytes_per_step = sum(reclaims) / tracked
        reason = (f"{bytes_per_step:.0f} B/step pile up between collections and gc.collect() frees them "
                  f"(in {reclaiming} of {len(reclaims)} windows): a reference cycle")
        confidence = round(reclaiming / len(reclaims), 2)
    else:
        verdict = Verdict.CLEAN
        bytes_per_step = 0.0
        reason = f"no growth after warm-up ({measured} steps measured, {len(after)} collections)"
        rise = series[-1].live_after - series[0].live_after if series else 0
        if rise > 0 and level is None:
            reason = (f"live tensors after collection ended {rise:,} B above the warm-up baseline, from storages made in "
                      f"{spread.steps_with_survivors} of {spread.measured_steps} steps: not steady growth (a one-off "
                      "such as lazy state or a cache filled once); rerun with more --steps to see whether it grows")
        if level is not None:
            # With a stride only the tracked steps' tensors are counted: the rise is theirs.
            whose = "live tensors" if run.track_every == 1 else \
                f"live tensors of the tracked steps (1 in {run.track_every}; --track-every 1 counts all)"
            reason = (f"{whose} grew by {series[-1].live_after - series[0].live_after:,} B after warm-up, then "
                      f"stayed level from step {series[level].step} to {series[-1].step}: bounded (a cache, a buffer "
                      "or optimizer state that filled), not a leak")
        confidence = round(1.0 - reclaiming / len(reclaims), 2)
    # Only what survives collection runs the memory out: a delayed-free cycle is reclaimed at
    # each collection, however late, so it gets no countdown.
    free = signals.device_free_bytes(device) if verdict is Verdict.RETAINED else None
    # On the CPU a retained graph's C++ nodes use the same memory as the tensors, and only the
    # heap signal sees them (losses.append(loss): 4 B/step of storage, ~6 KB/step of heap, measured).
    # On CUDA the allocator rounds each block up, so its slope is what the device really loses.
    growth = bytes_per_step
    second = heap_slope if device == "cpu" else cuda_slope
    if second is not None and second > growth:
        growth = second
    steps_to_oom = free / growth if free and growth > 0 else None
    return ProbeReport(verdict=verdict, reason=reason, bytes_per_step=bytes_per_step,
                       graph_nodes_per_step=node_slope, confidence=confidence, steps_to_oom=steps_to_oom,
                       heap_bytes_per_step=heap_slope, cuda_bytes_per_step=cuda_slope, holders=holders, **common)


def _add_graph_holders(holders: list[Holder], graph_holders: list[Holder], node_slope: float) -> None:
    """Give the growing graph's nodes to the holder already named for bytes, or add its own."""
    for h in graph_holders:
        existing = next((x for x in holders if x.subject == h.subject), None)
        target = existing or h
        target.graph_nodes_per_step = node_slope
        target.verdict = "retained"
        if existing is None:
            holders.append(h)


def _up_fraction(values: list[int]) -> float:
    if len(values) < 2:
        return 0.0
    return sum(1 for a, b in zip(values, values[1:]) if b > a) / (len(values) - 1)
