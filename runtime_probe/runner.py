"""Run the step N times under the tracker and record what stays alive.

Python's automatic collector is paused for the whole run: under the dispatch mode every tensor is
a Python object and the collector ran 44 times in 120 steps instead of 1-3 in 200 (measured on
torch 2.13), which would free reference cycles before they could be seen growing. The probe
collects itself every K steps and at the end, and compares the live bytes before and after.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from . import graph, interrupt, signals
from . import attribute, threads
from .attribute import Holder, display_path
from .saved import SavedIndex, SavedIndexSampler
from .stride import StridePlan
from .tracker import LiveStorageTracker, StorageRecord


@dataclass
class StepError:
    step: int
    exception: str  # one line: "RuntimeError: function FewerBackward returned an incorrect number of gradients ..."
    where: str  # the last user frame: "file.py:12"
    out_of_memory: bool = False  # MemoryError, torch's OutOfMemoryError, or an allocator's "out of memory"


@dataclass
class Collection:
    step: int
    live_before: int  # live bytes before gc.collect()
    live_after: int
    graph_nodes: int  # autograd nodes reachable from live tensors and made in a tracked step after warm-up
    tracked: int  # tracked steps after warm-up so far: the x axis for bytes per step
    heap_bytes: int | None  # glibc mallinfo2, after collection
    cuda_bytes: int | None
    cuda_reserved: int | None = None  # torch.cuda.memory_reserved(): the caching allocator's blocks


@dataclass
class Run:
    steps_requested: int
    warmup: int
    gc_every: int
    track_every: int = 1  # one step in this many ran under the tracker after warm-up
    live_bytes: list[int] = field(default_factory=list)  # after each step, before any collection
    step_tracked: list[bool] = field(default_factory=list)
    step_peak_bytes: list[int] = field(default_factory=list)  # tracked steps: highest live bytes above the start
    step_seconds: list[float] = field(default_factory=list)
    collections: list[Collection] = field(default_factory=list)
    error: StepError | None = None
    interrupted: bool = False
    interrupted_by: str = ""  # the signal that stopped the run ("SIGTERM"); "" for a KeyboardInterrupt raised by code
    node_ranges: list[tuple[int, int]] = field(default_factory=list)  # tracked steps' autograd sequence numbers
    survivor_steps: set[int] = field(default_factory=set)
    survivor_bytes: int = 0
    reclaimed_holders: list[Holder] = field(default_factory=list)  # what held storages gc.collect() freed
    retained_holders: list[Holder] = field(default_factory=list)
    graph_holders: list[Holder] = field(default_factory=list)
    regrown: bool = False  # see _newest_regrown
    regrown_holders: list[Holder] = field(default_factory=list)
    # Evidence for naming holders once the verdict is known; emptied by Measurement.release().
    survivors: list[StorageRecord] = field(default_factory=list, repr=False)
    newest_regrown: StorageRecord | None = field(default=None, repr=False)
    gc_enabled_before: bool = True  # gc.isenabled() when the first step began
    gc_frozen_before: int = 0  # gc.get_freeze_count() then: objects a framework froze
    # What the process did to the collector during the run (a script's own gc.disable() or
    # gc.freeze() after its imports, a framework's at fit time): the step it did it in.
    gc_disabled_at: int | None = None
    gc_frozen_at: int | None = None
    gc_frozen_during: int = 0  # the objects that freeze froze
    # torch.compile calls, and entries into compiled code, from the first step on (_CompileWatch).
    compiled: int = 0
    # int64 tensors the sampled steps saved for backward (saved.py), biggest first.
    saved_indices: list[SavedIndex] = field(default_factory=list)
    # With a chosen stride: every step was tracked from this step on, once a collection saw growth.
    dense_from: int | None = None
    dense_gc_every: int | None = None  # the collections' interval from dense_from on
    _tracked_upto: list[int] = field(default_factory=lambda: [0], repr=False)  # [i]: tracked among steps 1..i

    @property
    def steps_done(self) -> int:
        return len(self.live_bytes)

    def tracked_between(self, first: int, last: int) -> int:
        """Tracked steps s with first < s <= last."""
        # Asked at every collection: prefix sums keep a long run linear, extended as steps land.
        upto = self._tracked_upto
        for on in self.step_tracked[len(upto) - 1:]:
            upto.append(upto[-1] + on)
        first, last = max(first, 0), min(last, len(upto) - 1)
        return upto[last] - upto[first] if first < last else 0


class Measurement:
    """The track and series stages for one run, driven one step at a time: `begin()` before a
    step's work and `end()` after it (or `fail(exc)` when it raised), then `close()` for the
    evidence and `release()` to give the collector back. The tracker's mode is on for a tracked
    step from `begin()` to `end()`, on the thread that called `begin()` (dispatch modes are
    per-thread; other threads are seen through `threads.py`).

    Python's automatic collector is paused from the first `begin()` to `release()`.
    """

    def __init__(self, steps: int, warmup: int, gc_every: int, track_every: int | None = None,
                 name_reclaimed: bool = True) -> None:
        warmup = max(0, min(warmup, steps // 2))
        self.plan = StridePlan(steps, warmup, track_every)
        self.run = Run(steps, warmup, gc_every)
        self._gc_every = gc_every
        if warmup == 0:
            self.run.gc_every = self.plan.decide(gc_every)
        self.run.track_every = self.plan.every
        self.tracker = LiveStorageTracker()
        self.saved = SavedIndexSampler()
        self._sampling = False
        self.tracker.skipping = self.plan.every > 1
        self.name_reclaimed = name_reclaimed
        self.steps = steps
        self.index = 0  # the step begun last (1-based)
        self.open = False
        self.closed = False
        self._started = False
        self._was_enabled = True  # what the process wants of the collector once the probe is done
        self._collector: _CollectorWatch | None = None
        self._compile_watch: _CompileWatch | None = None
        self._frozen = False
        self._attributed_reclaim = False
        self._tracked = False
        self._start_live = 0
        self._first_node = 0
        self._t0 = 0.0
        self._c0 = 0.0
        self._timing_cpu = False
        self._cpu_seconds: float | None = None

    # -- one step ------------------------------------------------------------------------------
    def begin(self) -> int:
        if self.open:
            raise RuntimeError("step_started() twice without step_finished() between")
        if not self._started:
            self._started = True
            run = self.run
            # What the process ran with before the probe paused the collector: a delayed-free
            # cycle never frees where it is off, and a framework's gc.freeze() hides its objects.
            run.gc_enabled_before = self._was_enabled = gc.isenabled()
            run.gc_frozen_before = gc.get_freeze_count()
            gc.disable()
            self._collector = _CollectorWatch(self)
            self._compile_watch = _CompileWatch(run)
            threads.watch(self.tracker)
        self.index += 1
        i = self.index
        tracker = self.tracker
        self._tracked = self.plan.tracked(i)
        tracker.begin_step(i)
        self._start_live = tracker.live_bytes
        self._marked = self._tracked and i > self.run.warmup
        self._first_node = graph.sequence_mark() if self._marked else 0
        self.open = True
        self._sampling = self._marked and self.saved.wanted
        if self._sampling:
            self.saved.start()
        if self._tracked:
            tracker.__enter__()
        threads.tracking(self._tracked)
        # The thread's CPU time only where the stride is calibrated: reading it costs ~8 us here.
        self._timing_cpu = self.plan.calibrating(i)
        self._c0 = time.thread_time() if self._timing_cpu else 0.0
        self._t0 = time.perf_counter()
        return i

    def _leave(self, finished: bool = False) -> float:
        seconds = time.perf_counter() - self._t0
        self._cpu_seconds = time.thread_time() - self._c0 if self._timing_cpu else None
        threads.tracking(False)
        if self.open and self._tracked:
            self.tracker.__exit__(None, None, None)
        if self._sampling:
            self.saved.stop(keep=finished)
            self._sampling = False
        self.open = False
        return seconds

    def end(self) -> bool:
        """The step begun last finished: record it, collect when due. True once all steps ran."""
        if not self.open:
            raise RuntimeError("step_finished() without step_started()")
        seconds = self._leave(finished=True)
        run, plan, tracker, i, tracked = self.run, self.plan, self.tracker, self.index, self._tracked
        if self._marked:
            run.node_ranges.append((self._first_node, graph.sequence_mark()))
        plan.observe(i, tracked, seconds, self._cpu_seconds)
        run.step_seconds.append(seconds)
        run.live_bytes.append(tracker.live_bytes)
        run.step_tracked.append(tracked)
        if tracked:
            run.step_peak_bytes.append(tracker.peak_bytes - self._start_live)
        if i == run.warmup:
            run.gc_every = plan.decide(self._gc_every)
            run.track_every = plan.every
            tracker.skipping = plan.every > 1
            _collect(tracker, run, i)  # the baseline the growth is measured from
            # Freezing what exists now makes each later collection cheap (it skips the
            # ~165k objects torch itself owns); objects made after warm-up are still seen.
            # The probe's own freeze, not the process's: around _CollectorWatch.
            self._collector.originals["freeze"]()
            self._frozen = True
        elif plan.collects(i):
            if self.name_reclaimed and not self._attributed_reclaim and run.tracked_between(run.warmup, i - 1) >= 1:
                # Still frozen: gc.get_referrers does not see what existed at the end of
                # warm-up, but a cycle gc.collect() can free was made after it, and unfreezing
                # would make this collection a full one (~150 ms over torch's objects).
                pending = attribute.name_reclaim_candidates(tracker, run.warmup, i)
                _collect(tracker, run, i)
                run.reclaimed_holders = attribute.reclaimed(pending, run.tracked_between(run.warmup, i - 1))
                self._attributed_reclaim = True
            else:
                _collect(tracker, run, i)
            if plan.may_densify(i + 1) and _growth_seen(run, tracker, i):
                # Evidence of a leak with one step in K tracked: every step from now on, so one
                # that lands on some steps only is sampled on all of them (stride.py).
                plan.densify(i + 1)
                run.dense_from, run.dense_gc_every = i + 1, plan.dense_interval
        return i >= self.steps

    def fail(self, exc: BaseException) -> None:
        """The step begun last raised `exc`: the run stops there, like a failed step."""
        self._leave()
        if isinstance(exc, SystemExit):
            # The step ended the process (an early-stopping check, a script's sys.exit): the
            # run stops there like a raise, with the report, instead of exiting silently.
            self.run.error = StepError(self.index, f"SystemExit: {exc.code}", _user_frame(exc))
        else:
            self.run.error = StepError(self.index, _one_line(exc), _user_frame(exc), _out_of_memory(exc))

    def interrupt(self, stop: BaseException) -> None:
        """Ctrl-C or a stop signal: the run ends with a partial report, no failed step."""
        if self.open:
            self._leave()
        self.run.interrupted = True
        self.run.interrupted_by = self.run.interrupted_by or interrupt.signal_name(stop)

    def abandon(self) -> None:
        """A step begun and never finished (the driver stopped early): not counted."""
        if self.open:
            self._leave()

    # -- the end of the run ---------------------------------------------------------------------
    def close(self) -> Run:
        """The final collection and the survivors: the evidence the decision is made on."""
        if self.closed:
            return self.run
        self.closed = True
        self.abandon()
        run, tracker = self.run, self.tracker
        threads.unwatch(tracker)
        if not self._started:
            return run
        run.saved_indices = self.saved.result()
        # After a failed step too: what the steps before it measured is the report's other half
        # (a leak that ran the memory out is seen only here).
        if run.steps_done > run.warmup:
            last = run.steps_done
            pending = None
            if self.name_reclaimed and not self._attributed_reclaim and run.tracked_between(run.warmup, last - 1) >= 1:
                pending = attribute.name_reclaim_candidates(tracker, run.warmup, last)
            # Like every collection after warm-up, a frozen one: garbage that is part of what
            # warm-up made stays for the normal collector; a full pass costs ~150 ms here.
            _collect(tracker, run, last)
            if self._frozen:
                # The holders of survivors may predate the freeze (a module's list, a global).
                gc.unfreeze()
                self._frozen = False
            if pending is not None:
                run.reclaimed_holders = attribute.reclaimed(pending, run.tracked_between(run.warmup, last - 1))
            # The last two steps are not steady state: a cache overwritten each step, or the
            # gradients set_to_none makes anew, still hold them.
            run.survivors = [r for r in tracker.survivors(run.warmup) if r.step <= last - 2]
            run.survivor_steps = {r.step for r in run.survivors}
            run.survivor_bytes = sum(r.nbytes for r in run.survivors)
            run.newest_regrown = _newest_regrown(tracker, run, last)
            run.regrown = run.newest_regrown is not None
        return run

    def release(self) -> None:
        """The collector as it was before the run; the tracker's records are dropped."""
        threads.unwatch(self.tracker)
        if self._collector is not None:
            self._collector.remove()
            self._collector = None
        if self._compile_watch is not None:
            self._compile_watch.remove()
            self._compile_watch = None
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
        if self._started:
            if self.run.gc_frozen_before or self.run.gc_frozen_at is not None:
                gc.freeze()  # the process had frozen objects (a framework's gc.freeze()): frozen again
            if self._was_enabled:
                gc.enable()
            self._started = False
        self.run.survivors = []
        self.run.newest_regrown = None


class _CollectorWatch:
    """gc.disable(), gc.enable() and gc.freeze() as the process calls them while the probe holds
    the collector: the run records them (a script turns the collector off or freezes a framework's
    objects after its imports, when the probe has already begun), and the collector is given back
    as the process last asked. disable/enable only record what is asked: the collector stays
    paused while measuring. freeze freezes, as it would without the probe: a cycle through frozen
    objects is never collected, in the measured run as in the real one. Code that took the
    functions before the probe began (`from gc import disable`) is not seen."""

    def __init__(self, measurement: "Measurement") -> None:
        self.originals = {name: getattr(gc, name) for name in ("disable", "enable", "freeze")}
        run = measurement.run

        def disable() -> None:
            measurement._was_enabled = False
            if run.gc_disabled_at is None and run.gc_enabled_before:
                run.gc_disabled_at = max(measurement.index, 1)

        def enable() -> None:
            measurement._was_enabled = True

        def freeze() -> None:
            before = gc.get_freeze_count()
            self.originals["freeze"]()
            if run.gc_frozen_at is None:
                run.gc_frozen_at = max(measurement.index, 1)
            run.gc_frozen_during += gc.get_freeze_count() - before

        gc.disable, gc.enable, gc.freeze = disable, enable, freeze

    def remove(self) -> None:
        for name, function in self.originals.items():
            setattr(gc, name, function)


# What convert_frame asks to skip a frame under a dispatch mode, in the torch versions that do:
# 2.11 and 2.13 import both (the stack walk, and the flag it falls back on); 2.4.1 neither.
_DYNAMO_MODE_CHECKS = ("any_torch_dispatch_mode_on_stack", "is_in_any_mode_without_ignore_compile_internals")


class _CompileWatch:
    """Whether torch.compile'd code ran during the run: the tracker is a dispatch mode, and under
    it compiled code runs eagerly (measured on torch 2.13: a function compiled before the mode was
    pushed ran its aten ops one by one under it, and one first called under the mode was never
    compiled; Dynamo's counters stayed empty). The report must not let the compiled path pass for
    measured. Counted: torch.compile calls (a script compiles after the probe began) and entries
    into compiled code (a model compiled before: at import, or before a Trainer's fit), which go
    through Dynamo's eval_frame._callback_from_stance with a compiler's callback on every call
    (code Dynamo is told to skip goes through it too, with none), or on a torch without it through
    eval_frame.set_eval_frame. Both are private: where a torch has neither, only the torch.compile
    calls are seen.

    One set of wrappers serves every run in progress (a probe inside a probe, a Lightning fit in a
    probed script): each wrapper counts for all of them, and the originals go back when the last
    run is released, in whatever order the runs end."""

    _runs: list[Run] = []
    _originals: list[tuple[object, str, object]] = []

    def __init__(self, run: Run) -> None:
        self.run = run
        if not _CompileWatch._runs:
            _CompileWatch._install()
        _CompileWatch._runs.append(run)

    @staticmethod
    def _install() -> None:
        torch = sys.modules.get("torch")
        if torch is None:
            return
        runs = _CompileWatch._runs

        def counting(owner, name: str, counts=lambda *args: True, after=lambda: None) -> None:
            original = getattr(owner, name, None)
            if not callable(original):
                return

            def counted(*args, **kwargs):
                if counts(*args):
                    for run in runs:
                        run.compiled += 1
                try:
                    return original(*args, **kwargs)
                finally:
                    after()

            counted.__wrapped__ = original
            _CompileWatch._originals.append((owner, name, original))
            setattr(owner, name, counted)

        def eager_under_the_tracker() -> None:
            # torch 2.13 compiles no frame while a dispatch mode is on the stack (convert_frame
            # checks), so compiled code runs eagerly under the tracker. torch 2.4.1 has no such
            # check: it recompiled under the tracker, and the user's step failed (step 23 of a
            # compiled model: BackendCompilerFailed, "Please convert all Tensors to FakeTensors
            # first"). There Dynamo is off for the run (config.disable): the same eager path.
            convert = sys.modules.get("torch._dynamo.convert_frame")
            config = sys.modules.get("torch._dynamo.config")
            if convert is None or config is None or getattr(config, "disable", True) is not False:
                return
            if any(hasattr(convert, name) for name in _DYNAMO_MODE_CHECKS):
                return
            _CompileWatch._originals.append((config, "disable", False))
            config.disable = True

        eager_under_the_tracker()
        counting(torch, "compile", after=eager_under_the_tracker)  # a first compile imports Dynamo
        # Not imported yet: nothing was compiled, and a torch.compile call from now on is counted above.
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        if eval_frame is not None:
            # Its argument is the frame callback: a compiler's for compiled code; None (or False) for
            # code torch._disable_dynamo wraps (an optimizer's step()), which runs as it is. Before
            # _callback_from_stance (torch 2.4.1 has none) a compiled function's wrapper passes the
            # callback to the module's set_eval_frame itself, on entry (and the prior one on exit).
            entry = "_callback_from_stance" if hasattr(eval_frame, "_callback_from_stance") else "set_eval_frame"
            counting(eval_frame, entry, lambda callback=None, *rest: callback not in (None, False))

    def remove(self) -> None:
        runs = _CompileWatch._runs
        index = next((i for i, run in enumerate(runs) if run is self.run), None)
        if index is None:  # removed already
            return
        del runs[index]
        if not runs:
            for owner, name, original in reversed(_CompileWatch._originals):
                setattr(owner, name, original)
            _CompileWatch._originals.clear()


def run_steps(step: Callable[[], object], steps: int, warmup: int, gc_every: int,
              on_step: Callable[[int], None] | None = None, attribute: bool = True,
              track_every: int | None = None) -> Run:
    """Run `step` `steps` times under a Measurement and return its evidence (no holders named)."""
    measurement = Measurement(steps, warmup, gc_every, track_every, name_reclaimed=attribute)
    try:
        try:
            while True:
                i = measurement.begin()
                try:
                    step()
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # noqa: BLE001 - the user's step: anything it raises is a finding
                    measurement.fail(exc)
                    break
                done = measurement.end()
                if on_step is not None:
                    on_step(i)
                interrupt.check()
                if done:
                    break
        except KeyboardInterrupt as stop:
            measurement.interrupt(stop)
        try:
            measurement.close()
        except KeyboardInterrupt as stop:
            measurement.interrupt(stop)
    finally:
        measurement.release()
    return measurement.run


# Ops that make a tensor from the one before it plus more: the way one keeps growing in place of itself.
_CONCATENATING = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack",
                            "column_stack", "row_stack", "constant_pad_nd", "pad"})


def _newest_regrown(tracker: LiveStorageTracker, run: Run, last: int) -> StorageRecord | None:
    """The biggest storage the last steps made by concatenation, when the live set rose at every
    collection: one tensor made anew and bigger each step (`self.hist = torch.cat([self.hist,
    row])`) leaves no survivor from an earlier step, only a newest one that keeps growing. Made by
    another op (a longer sequence's logits under a length curriculum, kept detached) it is no leak."""
    after = [c.live_after for c in run.collections if c.step >= run.warmup]
    if len(after) < 5 or not all(b > a for a, b in zip(after, after[1:])):
        return None
    newest = [r for r in list(tracker.records.values()) if r.step > last - 2 and r() is not None]
    if not newest:
        return None
    biggest = max(newest, key=lambda r: r.nbytes)
    return biggest if biggest.op.split(".")[0] in _CONCATENATING else None


def _growth_seen(run: Run, tracker: LiveStorageTracker, step: int) -> bool:
    """Whether the collection just made after step `step` saw what a leak leaves: tracked storages
    it freed (a cycle), a storage a measured step made two or more steps before alive after it,
    or more graph nodes held than at the collection before (a clean step's last loss holds the
    same graph at every collection)."""
    last = run.collections[-1]
    if last.live_before > last.live_after:
        return True
    before = [c for c in run.collections[:-1] if c.step > run.warmup]
    if before and last.graph_nodes > before[-1].graph_nodes:
        return True
    return any(run.warmup < record.step <= step - 2 and record.nbytes and record() is not None
               for record in list(tracker.records.values()))


def _collect(tracker: LiveStorageTracker, run: Run, step: int) -> None:
    before = tracker.live_bytes
    gc.collect()
    run.collections.append(Collection(step, before, tracker.live_bytes, graph.reachable_nodes(tracker.live_tensors(), run.node_ranges),
                                      run.tracked_between(run.warmup, step), signals.heap_bytes(),
                                      signals.cuda_allocated(), signals.cuda_reserved()))


def _one_line(exc: BaseException) -> str:
    """"Type: message" on one line: the report and the cross-check show it in one."""
    message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _out_of_memory(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, MemoryError):
        return True
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    # The CPU allocator raises a plain RuntimeError ("DefaultCPUAllocator: can't allocate memory"),
    # as older CUDA and other backends did ("CUDA out of memory", "MPS backend out of memory").
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _user_frame(exc: BaseException) -> str:
    import torch

    torch_dir = os.path.dirname(torch.__file__)
    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith((torch_dir, here))]
    if not frames:
        return ""
    f = frames[-1]
    return f"{display_path(f.filename)}:{f.lineno}"



