"""Decide: from a run's measured series to a verdict and the evidence for it.

One way only: it reads the Run that runner.Measurement filled and returns a Decision (verdict,
reason, bytes per step, confidence, which holders explain it). Naming those holders is
attribute.name_holders' job, after this; writing the prose of the report is report.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import signals
from .runner import Run, StepError
from .stride import DENSE_SETTLE
from .verdict import Verdict, growing, keeps_climbing, leak_start, levelled_off, robust_slope, survivor_spread


@dataclass
class Decision:
    verdict: Verdict
    reason: str
    bytes_per_step: float
    graph_nodes_per_step: float
    confidence: float
    steps_to_oom: float | None = None
    heap_bytes_per_step: float | None = None
    cuda_bytes_per_step: float | None = None
    # Which evidence names the holders: "retained" (survivors), "regrown" (the newest storage of
    # a tensor made anew and bigger each step), "reclaimed" (what collections freed), "" none.
    holder_source: str = ""
    graph_grows: bool = False
    regrown_bytes: float = 0.0
    too_few: bool = False
    # When a step failed: the verdict of the steps measured before it, and why.
    measured_verdict: Verdict | None = None
    measured_reason: str = ""
    # Judged on the steps from this one only: every step tracked from a little before (judged()).
    judged_from: int | None = None


def _failed(error: StepError, measured: Decision | None) -> Decision:
    """The error verdict, over what the steps before the failed one measured (None: only warm-up ran)."""
    what = f"ran out of memory ({error.exception})" if error.out_of_memory else f"raised {error.exception}"
    reason = f"step {error.step} {what}"
    if measured is None:
        return Decision(Verdict.ERROR, reason, 0.0, 0.0, 1.0)
    if error.out_of_memory and measured.verdict.is_leak:
        nodes = f" +{measured.graph_nodes_per_step:.1f} nodes/step" if measured.graph_nodes_per_step else ""
        reason += (f"; the steps before it leak {measured.bytes_per_step:.0f} B/step{nodes} "
                   f"({measured.verdict.value}): a likely cause")
    # Out of memory already, the countdown to it is moot.
    return replace(measured, verdict=Verdict.ERROR, reason=reason, confidence=1.0,
                   measured_verdict=measured.verdict, measured_reason=measured.reason,
                   steps_to_oom=None if error.out_of_memory else measured.steps_to_oom)


def judged(run: Run) -> Run:
    """The run as it is judged: one whose stride gave way to every step (stride.densify) is
    judged on the steps tracked every step, after DENSE_SETTLE of them settled like a warm-up,
    when at least 4 steps and 2 collections are left there; else as it ran."""
    if run.dense_from is None:
        return run
    warmup = run.dense_from - 1 + DENSE_SETTLE
    if run.steps_done - warmup < 4 or sum(1 for c in run.collections if c.step > warmup) < 2:
        return run
    survivors = [r for r in run.survivors if r.step > warmup]
    return replace(run, warmup=warmup, track_every=1, dense_from=None, survivors=survivors,
                   survivor_steps={r.step for r in survivors}, survivor_bytes=sum(r.nbytes for r in survivors))


def decide(run: Run, device: str) -> Decision:
    """The verdict on a run's series, with its evidence; no holder is named here."""
    view = judged(run)
    if view is not run:
        return replace(decide(view, device), judged_from=view.warmup + 1)
    if run.error is None:
        return _decide(run, device)
    return _failed(run.error, _decide(run, device) if run.steps_done > run.warmup else None)


def _decide(run: Run, device: str) -> Decision:
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
        if run.steps_done <= run.warmup:
            why = (f"no step was measured: {run.steps_done} of {run.steps_requested} steps ran, all within the "
                   f"{run.warmup} warm-up steps" if run.steps_done else f"no step ran (0 of {run.steps_requested})")
        else:
            why = (f"too few measured steps to see growth: {measured} after the {run.warmup} warm-up steps "
                   f"(at least 4 and one collection are needed; {run.steps_done} of {run.steps_requested} ran)")
        return Decision(Verdict.NOT_MEASURED, why, 0.0, 0.0, 0.0,
                        heap_bytes_per_step=heap_slope, cuda_bytes_per_step=cuda_slope, too_few=True)

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

    holder_source = ""
    graph_reason = f"the autograd graph held by live tensors grows by {node_slope:.1f} nodes/step"
    if regrown and regrown_bytes > 0:
        verdict = Verdict.RETAINED
        holder_source = "regrown"
        bytes_per_step = regrown_bytes
        reason = (f"live tensors after collection rose at every one of the {len(series) - 1} collections, "
                  f"{regrown_bytes:.0f} B/step, though no earlier step's tensors survive: one tensor made "
                  "anew and bigger each step (torch.cat onto itself)")
        if graph_grows:  # cat of a graph-attached row: its graph chains too
            reason += f"; {graph_reason}"
        confidence = 1.0
    elif (spread.steady or late) and retained_bytes > 0 and level is None or graph_grows:
        verdict = Verdict.RETAINED
        holder_source = "retained"
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
        holder_source = "reclaimed"
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
                f"live tensors of the tracked steps (1 in {run.track_every}" + (
                    f", all from step {run.dense_from})" if run.dense_from else "; --track-every 1 counts all)")
            reason = (f"{whose} grew by {series[-1].live_after - series[0].live_after:,} B after warm-up, then "
                      f"stayed level from step {series[level].step} to {series[-1].step}: bounded (a cache, a buffer "
                      "or optimizer state that filled), not a leak")
        confidence = round(1.0 - reclaiming / len(reclaims), 2)
        grew = _allocator_grew(series, device)
        if grew is not None:
            verdict, reason = Verdict.ALLOCATOR_GREW, grew
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
    return Decision(verdict, reason, bytes_per_step, node_slope,
                    confidence, steps_to_oom=steps_to_oom, heap_bytes_per_step=heap_slope,
                    cuda_bytes_per_step=cuda_slope, holder_source=holder_source, graph_grows=graph_grows,
                    regrown_bytes=regrown_bytes)


# The caching allocator takes memory from the driver in segments of 2 MiB (small blocks) and 20 MiB
# or more (large ones): less than one segment of rise is no trend.
ALLOCATOR_SEGMENT = 2 << 20


def _allocator_grew(series: list, device: str) -> str | None:
    """Why the run is "allocator-grew", or None: on CUDA, with no tensor growth found, the caching
    allocator's reserved memory (what nvidia-smi shows) rose after warm-up while the bytes
    allocated to tensors did not. A user watching nvidia-smi sees a leak; freed blocks are kept
    for reuse (a batch shape that changes, fragmentation), and torch.cuda.empty_cache() returns them."""
    if device != "cuda":
        return None
    points = [(c.step, c.cuda_reserved, c.cuda_bytes) for c in series
              if c.cuda_reserved is not None and c.cuda_bytes is not None]
    if len(points) < 3:
        return None
    steps = [p[0] for p in points]
    reserved, allocated = [p[1] for p in points], [p[2] for p in points]
    reserved_rise = reserved[-1] - reserved[0]
    allocated_rise = allocated[-1] - allocated[0]
    slope = robust_slope(steps, reserved)
    if reserved_rise < ALLOCATOR_SEGMENT or slope <= 0:
        return None
    # Allocated "did not grow": no steady slope and a rise under an eighth of the reserved one
    # (a last step's tensors still alive at a collection move it by a block or two).
    if robust_slope(steps, allocated) > 0 and allocated_rise * 8 >= reserved_rise:
        return None
    from .progress import human_bytes

    return (f"the caching allocator grew, allocated memory did not: not a leak (torch.cuda.memory_reserved() rose "
            f"{human_bytes(reserved_rise)} from step {steps[0]} to {steps[-1]}, memory_allocated() "
            f"{'+' if allocated_rise >= 0 else '-'}{human_bytes(abs(allocated_rise))}); the allocator keeps freed "
            "blocks for reuse, and torch.cuda.empty_cache() returns them to the driver")


def _up_fraction(values: list[int]) -> float:
    if len(values) < 2:
        return 0.0
    return sum(1 for a, b in zip(values, values[1:]) if b > a) / (len(values) - 1)
