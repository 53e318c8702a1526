"""Run the step N times under the tracker and record what stays alive.

Python's automatic collector is paused for the whole run: under the dispatch mode every tensor is
a Python object and the collector ran 44 times in 120 steps instead of 1-3 in 200 (measured on
torch 2.13), which would free reference cycles before they could be seen growing. The probe
collects itself every K steps and at the end, and compares the live bytes before and after.
"""

from __future__ import annotations

import gc
import os
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from . import graph, interrupt, signals
from .attribute import Holder, display_path, find_holders
from .stride import StridePlan
from .tracker import LiveStorageTracker, StorageRecord
from .verdict import leak_start


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


def run_steps(step: Callable[[], object], steps: int, warmup: int, gc_every: int,
              on_step: Callable[[int], None] | None = None, attribute: bool = True,
              track_every: int | None = None) -> Run:
    warmup = max(0, min(warmup, steps // 2))
    plan = StridePlan(steps, warmup, track_every)
    run = Run(steps, warmup, gc_every)
    if warmup == 0:
        run.gc_every = plan.decide(gc_every)
    run.track_every = plan.every
    tracker = LiveStorageTracker()
    tracker.skipping = plan.every > 1
    was_enabled = gc.isenabled()
    gc.disable()
    frozen = False
    attributed_reclaim = False
    try:
        for i in range(1, steps + 1):
            tracked = plan.tracked(i)
            tracker.begin_step(i)
            start_live = tracker.live_bytes
            marked = tracked and i > warmup
            first_node = graph.sequence_mark() if marked else 0
            start = time.perf_counter()
            try:
                if tracked:
                    with tracker:
                        step()
                else:
                    step()
            except KeyboardInterrupt:
                raise  # Ctrl-C or a stop signal: the run ends with a partial report (below), no failed step
            except SystemExit as exc:
                # The step ended the process (an early-stopping check, a script's sys.exit): the
                # run stops there like a raise, with the report, instead of exiting silently.
                run.error = StepError(i, f"SystemExit: {exc.code}", _user_frame(exc))
                break
            except BaseException as exc:  # noqa: BLE001 - the user's step: anything it raises is a finding
                # A BaseException subclass too (a framework's own abort): it is the step's failure,
                # reported like any other, not a traceback out of the probe.
                run.error = StepError(i, _one_line(exc), _user_frame(exc), _out_of_memory(exc))
                break
            seconds = time.perf_counter() - start
            if marked:
                run.node_ranges.append((first_node, graph.sequence_mark()))
            plan.observe(i, tracked, seconds)
            run.step_seconds.append(seconds)
            run.live_bytes.append(tracker.live_bytes)
            run.step_tracked.append(tracked)
            if tracked:
                run.step_peak_bytes.append(tracker.peak_bytes - start_live)
            if i == warmup:
                run.gc_every = plan.decide(gc_every)
                run.track_every = plan.every
                tracker.skipping = plan.every > 1
                _collect(tracker, run, i)  # the baseline the growth is measured from
                # Freezing what exists now makes each later collection cheap (it skips the
                # ~165k objects torch itself owns); objects made after warm-up are still seen.
                gc.freeze()
                frozen = True
            elif plan.collects(i):
                if attribute and not attributed_reclaim and run.tracked_between(warmup, i - 1) >= 1:
                    # Still frozen: gc.get_referrers does not see what existed at the end of
                    # warm-up, but a cycle gc.collect() can free was made after it, and unfreezing
                    # would make this collection a full one (~150 ms over torch's objects).
                    pending = _name_reclaim_candidates(tracker, run.warmup, i)
                    _collect(tracker, run, i)
                    run.reclaimed_holders = _reclaimed(pending, run.tracked_between(run.warmup, i - 1))
                    attributed_reclaim = True
                else:
                    _collect(tracker, run, i)
            if on_step is not None:
                on_step(i)
            interrupt.check()
    except KeyboardInterrupt as stop:
        run.interrupted = True
        run.interrupted_by = interrupt.signal_name(stop)
    try:
        # After a failed step too: what the steps before it measured is the report's other half
        # (a leak that ran the memory out is seen only here).
        if run.steps_done > run.warmup:
            last = run.steps_done
            pending = None
            if attribute and not attributed_reclaim and run.tracked_between(run.warmup, last - 1) >= 1:
                pending = _name_reclaim_candidates(tracker, run.warmup, last)
            # Like every collection after warm-up, a frozen one: garbage that is part of what
            # warm-up made stays for the normal collector; a full pass costs ~150 ms here.
            _collect(tracker, run, last)
            if frozen:
                # The holders of survivors may predate the freeze (a module's list, a global).
                gc.unfreeze()
                frozen = False
            if pending is not None:
                run.reclaimed_holders = _reclaimed(pending, run.tracked_between(run.warmup, last - 1))
            # The last two steps are not steady state: a cache overwritten each step, or the
            # gradients set_to_none makes anew, still hold them.
            survivors = [r for r in tracker.survivors(run.warmup) if r.step <= last - 2]
            run.survivor_steps = {r.step for r in survivors}
            run.survivor_bytes = sum(r.nbytes for r in survivors)
            newest = _newest_regrown(tracker, run, last)
            run.regrown = newest is not None
            if attribute:
                # Only roots whose graph reaches back before the last two steps: the latest step's
                # own `loss` and `logits` are no holders of what grew, a `total_loss` chain is.
                roots = [t for t in graph.graph_roots(tracker.live_tensors())
                         if graph.reachable_nodes([t], run.node_ranges[:-2])]
                named_roots = [(t, h) for t, h in zip(roots, find_holders(roots) if roots else []) if h is not None]
                del roots
                run.retained_holders = _attribute(tracker, survivors, run, named_roots)
                run.graph_holders = _by_subject(h for _, h in named_roots)
                del named_roots
                if newest is not None:
                    grouped = _holders_for(tracker, {newest.key: newest})
                    run.regrown_holders = [holder for holder, _ in grouped.values() if holder.subject]
    except KeyboardInterrupt as stop:
        run.interrupted = True
        run.interrupted_by = run.interrupted_by or interrupt.signal_name(stop)
    finally:
        if frozen:
            gc.unfreeze()
        if was_enabled:
            gc.enable()
    return run


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


def _collect(tracker: LiveStorageTracker, run: Run, step: int) -> None:
    before = tracker.live_bytes
    gc.collect()
    run.collections.append(Collection(step, before, tracker.live_bytes, graph.reachable_nodes(tracker.live_tensors(), run.node_ranges),
                                      run.tracked_between(run.warmup, step), signals.heap_bytes(),
                                      signals.cuda_allocated()))


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



def _site(record: StorageRecord) -> str:
    return f"{display_path(record.file)}:{record.line} ({record.op})"


def _tensors_by_storage(tracker: LiveStorageTracker, keys: set[int]) -> dict[int, list]:
    found: dict[int, list] = defaultdict(list)
    for t in tracker.live_tensors():
        key = tracker.storage_key(t)
        if key in keys:
            found[key].append(t)
    missing = keys - found.keys()
    if missing:
        # A tensor object no op returned shares the storage: `nn.Parameter(torch.zeros(n))` makes
        # a new Python object on the zeros' storage, and the zeros tensor itself is gone. Only the
        # collector's list of objects finds it (once, for what is still unnamed).
        import torch

        for obj in gc.get_objects():
            # type(), not isinstance: isinstance reads __class__, which some module objects warn on
            if issubclass(type(obj), torch.Tensor):
                key = tracker.storage_key(obj)
                if key in missing:
                    found[key].append(obj)
    return found


def _holders_for(tracker: LiveStorageTracker, records: dict[int, StorageRecord],
                 keys_per_site: int = 2, tensors_per_site: int = 6) -> dict[str, tuple[Holder, list[int]]]:
    """Group records by creation site, name one holder per site: {subject: (holder, keys)}."""
    by_site: dict[str, list[int]] = defaultdict(list)
    for key, record in records.items():
        by_site[_site(record)].append(key)
    tensors = _tensors_by_storage(tracker, set(records))
    sites, targets = [], []
    for site, keys in by_site.items():
        # Every tensor on the storage: a view on ctx holds the storage while its base has no
        # Python referrer at all.
        picked = [t for k in keys[-keys_per_site:] for t in tensors.get(k, ())][:tensors_per_site]
        for t in picked:
            sites.append(site)
            targets.append(t)
    del tensors
    holders = find_holders(targets) if targets else []
    del targets
    site_holder: dict[str, Holder] = {}
    for site, holder in zip(sites, holders):
        if holder is not None and site not in site_holder:
            site_holder[site] = holder
    grouped: dict[str, tuple[Holder, list[int]]] = {}
    for site, keys in by_site.items():
        holder = site_holder.get(site) or Holder("unknown", "", detail="no Python referrer: held inside the autograd graph or by C++")
        subject = holder.subject or f"<unnamed {site}>"
        entry = grouped.setdefault(subject, (holder, []))
        entry[1].extend(keys)
        if site not in entry[0].created_at:
            entry[0].created_at.append(site)
    return grouped


def _name_reclaim_candidates(tracker: LiveStorageTracker, warmup: int, step: int):
    # Storages from earlier steps of this window still alive before collection, named now:
    # after gc.collect() the ones in a cycle are gone.
    candidates = {k: r for k, r in list(tracker.records.items()) if warmup < r.step < step and r() is not None}
    return candidates, (_holders_for(tracker, candidates) if candidates else {})


def _reclaimed(pending, window: int) -> list[Holder]:
    candidates, grouped = pending
    holders = []
    for holder, keys in grouped.values():
        freed = [candidates[k] for k in keys if candidates[k]() is None]
        if freed:
            holder.bytes_per_step = sum(r.nbytes for r in freed) / max(1, window)
            holder.verdict = "delayed-free"
            holders.append(holder)
    holders.sort(key=lambda h: -h.bytes_per_step)
    return holders


def _attribute(tracker: LiveStorageTracker, survivors: list[StorageRecord], run: Run,
               named_roots: list[tuple[object, Holder]]) -> list[Holder]:
    if not survivors:
        return []
    records = {id(r): r for r in survivors}
    keyed = {k: r for k, r in list(tracker.records.items()) if id(r) in records}
    records = keyed
    last = run.steps_done - 2
    measured = max(1, run.tracked_between(run.warmup, last))
    holders = []
    grouped = _adopt_unreferenced(tracker, _holders_for(tracker, records), named_roots)
    for holder, keys in grouped.values():
        # A holder that began to fill late is measured from then, as the headline is.
        start = leak_start({records[k].step for k in keys}, run.warmup + 1, last,
                           lambda s: run.tracked_between(s - 1, last))
        since = max(1, run.tracked_between(start - 1, last)) if start is not None else measured
        holder.bytes_per_step = sum(records[k].nbytes for k in keys) / since
        holder.verdict = "retained"
        holders.append(holder)
    holders.sort(key=lambda h: -h.bytes_per_step)
    return holders


def _adopt_unreferenced(tracker: LiveStorageTracker, grouped: dict[str, tuple[Holder, list[int]]],
                        named_roots: list[tuple[object, Holder]]) -> dict[str, tuple[Holder, list[int]]]:
    """Storages with no Python referrer belong to the named holder that keeps them, not to
    '(unnamed)': what its graph saves (a branch backward never ran through, a state carried
    across steps), and the `.grad` of a tensor it holds (a kept parameter's gradient, or a
    retain_grad() tensor's: torch keeps it in C++, beside the tensor)."""
    unnamed = [subject for subject, (holder, _) in grouped.items() if not holder.subject]
    if not unnamed:
        return grouped
    owner: dict[int, tuple[Holder, str]] = {}
    seen: set[int] = set()  # shared: a node reachable from several roots is read once
    for root, holder in named_roots:
        for t in graph.saved_tensors(root, seen):
            owner.setdefault(tracker.storage_key(t), (holder, "saved in the graph"))
    named = {key: holder for holder, keys in grouped.values() if holder.subject for key in keys}
    for key, tensors in _tensors_by_storage(tracker, set(named)).items():
        for t in tensors:
            # .grad of a non-leaf warns and is None, unless retain_grad() asked for it
            grad = t.grad if t.is_leaf or t.retains_grad else None
            if grad is not None:
                owner.setdefault(tracker.storage_key(grad), (named[key], "the .grad of a tensor it holds"))
            # A view kept on ctx holds its base, whose graph no Python object names: what that
            # graph saves (a leaf made in the step, and its .grad) is the view's holder's too.
            for root in (t, t._base):
                if root is not None and root.grad_fn is not None:
                    for kept in graph.saved_tensors(root, seen):
                        owner.setdefault(tracker.storage_key(kept), (named[key], "saved in the graph"))
    for subject in unnamed:
        keys = grouped[subject][1]
        for key in (k for k in keys if k in owner):
            holder, how = owner[key]
            entry = grouped.setdefault(holder.subject, (holder, []))
            entry[1].append(key)
            site = f"{_site(tracker.records[key])}, {how}"
            if site not in entry[0].created_at:
                entry[0].created_at.append(site)
        keys[:] = [k for k in keys if k not in owner]
        if not keys:
            del grouped[subject]
    return grouped


def _by_subject(holders) -> list[Holder]:
    """The first holder of each name, in order."""
    out: dict[str, Holder] = {}
    for holder in holders:
        out.setdefault(holder.subject, holder)
    return list(out.values())
