"""ProbeReport: what one probe run found, as data; `to_dict()` is its JSON form.

Made by session.StepProbe.finish() from the decision and the named holders; rendered by report.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .attribute import Holder
from .runner import Run, StepError
from .verdict import Verdict


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
    # One line each, printed under the verdict: what the measurement could not see or what bears on
    # it (the collector off, threads it could not reach, a compiled region, int64 saved indices).
    notes: list[str] = field(default_factory=list)
    rank: int | None = None  # the torchrun rank (RANK) that measured this, when there is one
    # int64 tensors a step saves for backward (GL301's runtime side), per Function, biggest first.
    saved_indices: list = field(default_factory=list)
    # With a chosen stride: every step was tracked from this step on, once a collection saw growth.
    dense_from: int | None = None
    dense_gc_every: int | None = None  # the collections' interval from dense_from on
    run: Run | None = field(default=None, repr=False)

    @property
    def is_leak(self) -> bool:
        return self.verdict.is_leak

    @property
    def ok(self) -> bool:
        return self.verdict.no_leak

    def to_dict(self) -> dict:
        return report_dict(self)



def report_dict(report: ProbeReport) -> dict:
    run = report.run
    return {
        "name": report.name,
        "verdict": report.verdict.value,
        "reason": report.reason,
        "bytes_per_step": report.bytes_per_step,
        "graph_nodes_per_step": report.graph_nodes_per_step,
        "confidence": report.confidence,
        "steps_done": report.steps_done,
        "steps_requested": report.steps_requested,
        "warmup": report.warmup,
        "gc_every": report.gc_every,
        "track_every": report.track_every,
        "dense_from": report.dense_from,
        "dense_gc_every": report.dense_gc_every,
        "device": report.device,
        "steps_to_oom": report.steps_to_oom,
        "step_peak_bytes": report.step_peak_bytes,
        "median_step_ms": report.median_step_ms,
        "tracked_step_ms": report.tracked_step_ms,
        "heap_bytes_per_step": report.heap_bytes_per_step,
        "cuda_bytes_per_step": report.cuda_bytes_per_step,
        "interrupted": report.interrupted,
        "interrupted_by": report.interrupted_by,
        "error": asdict(report.error) if report.error else None,
        "measured_verdict": report.measured_verdict.value if report.measured_verdict else None,
        "measured_reason": report.measured_reason,
        "holders": [asdict(h) for h in report.holders],
        "notes": list(report.notes),
        "rank": report.rank,
        "saved_indices": [asdict(s) for s in report.saved_indices],
        "series": {
            "live_bytes": run.live_bytes if run else [],
            "tracked": run.step_tracked if run else [],
            "collections": [asdict(c) for c in run.collections] if run else [],
        },
    }
