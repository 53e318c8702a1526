"""Turn probe reports into text, JSON and a plot; know nothing about how they were measured."""

from __future__ import annotations

import json
import os
from dataclasses import asdict

from .crosscheck import Row
from .progress import human_bytes
from .probe_report import ProbeReport


def _growth(bytes_per_step: float | None, nodes: float) -> str:
    if bytes_per_step is None:
        return "-"
    text = f"{human_bytes(bytes_per_step)}/step"
    if nodes:
        text += f" +{nodes:.1f} nodes/step"
    return text


def report_text(report: ProbeReport) -> str:
    rank = f" [rank {report.rank}]" if report.rank is not None else ""
    lines = [f"gradlint probe: {report.name}{rank} ({report.steps_done}/{report.steps_requested} steps, "
             f"{report.warmup} warm-up, {report.device}, gc every {report.gc_every}"
             + (f", tracking 1 step in {report.track_every}" if report.track_every > 1 else "")
             + (f", every step from step {report.dense_from} (growth seen)" if report.dense_from else "")
             + (f", gc every {report.dense_gc_every} from then" if report.dense_from and report.dense_gc_every
                not in (None, report.gc_every) else "") + ")"]
    if report.interrupted:
        by = f" by {report.interrupted_by}" if report.interrupted_by else ""
        lines.append(f"  interrupted{by} after step {report.steps_done}: a partial report")
    lines.append(f"  verdict: {report.verdict.value}" + (
        f"  {_growth(report.bytes_per_step, report.graph_nodes_per_step)}  confidence {report.confidence:.2f}"
        if report.verdict.is_leak else ""))
    lines.append(f"  why: {report.reason}")
    for note in report.notes:
        lines.append(f"  note: {note}")
    if report.error is not None:
        lines.append(f"  step {report.error.step} raised at {report.error.where or '?'}: {report.error.exception}")
    if report.measured_verdict is not None:
        # What the steps before the failed one showed: the holders below are theirs.
        growth = (f"  {_growth(report.bytes_per_step, report.graph_nodes_per_step)}"
                  if report.measured_verdict.is_leak else "")
        lines.append(f"  measured before step {report.error.step} (a partial report): "
                     f"{report.measured_verdict.value}{growth}")
        lines.append(f"    why: {report.measured_reason}")
    if report.cuda_bytes_per_step is not None:
        lines.append(f"  cuda allocator (torch.cuda.memory_allocated after collection): "
                     f"{report.cuda_bytes_per_step:+,.0f} B/step")
    if report.steps_to_oom is not None:
        heap, cuda = report.heap_bytes_per_step, report.cuda_bytes_per_step
        nodes = ": the graph's C++ nodes" if report.graph_nodes_per_step > 0 else ""
        rate = (f" (heap +{heap:,.0f} B/step{nodes})"
                if report.device == "cpu" and heap is not None and heap > report.bytes_per_step else
                f" (allocator +{cuda:,.0f} B/step: its rounded blocks)"
                if report.device == "cuda" and cuda is not None and cuda > report.bytes_per_step else "")
        lines.append(f"  at this rate{rate} the {report.device} memory now free is gone after "
                     f"~{report.steps_to_oom:,.0f} steps")
    for h in report.holders:
        also = f" ({', '.join(h.aliases)})" if h.aliases else ""
        lines.append(f"  held by {h.subject or '(unnamed)'}{also}: {h.detail}" + (f" [{h.where}]" if h.where else ""))
        lines.append(f"    {_growth(h.bytes_per_step, h.graph_nodes_per_step)}, {h.verdict}")
        for site in _by_line(h.created_at)[:3]:
            lines.append(f"    created at {site}")
    if report.steps_done:
        # With no step run there is no step time or peak to show: "median 0.00 ms, 0 B" read as
        # a measured empty step.
        tracked = f" ({report.tracked_step_ms:.2f} ms when tracked)" if report.track_every > 1 else ""
        lines.append(f"  step: median {report.median_step_ms:.2f} ms under the probe{tracked}, "
                     f"{human_bytes(report.step_peak_bytes)} allocated above its start at peak")
    return "\n".join(lines) + "\n"


def table_text(rows: list[Row], with_scenario: bool = False) -> str:
    head = (["scenario"] if with_scenario else []) + ["holder", "bytes/step", "verdict", "static finding", "agreement"]
    body = []
    for r in rows:
        growth = _growth(r.bytes_per_step, r.graph_nodes_per_step)
        body.append(([r.scenario] if with_scenario else []) + [r.holder, growth, r.verdict, r.static, r.agreement])
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head), "-+-".join("-" * w for w in widths)]
    out += [fmt.format(*row) for row in body]
    notes = [f"  {r.holder}: {r.note}" for r in rows if r.note]
    return "\n".join(out + notes) + "\n"


def write_json(path: str, reports: list[ProbeReport], rows: list[Row]) -> None:
    data = {"reports": [r.to_dict() for r in reports], "cross_check": [asdict(r) for r in rows]}
    with open(path, "w") as f:
        json.dump(data, f, indent=2)


class PlotUnavailable(Exception):
    pass


def write_plot(path: str, reports: list[ProbeReport]) -> None:
    """Live tensor bytes per step (line) and after each gc.collect() (dots), one curve per report."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'torch-gradlint[plot]' (or pip install matplotlib)") from None
    fig, ax = plt.subplots(figsize=(9, 5))
    # Scenarios that leak the same bytes per step draw the same line: each curve is thinner than
    # the one before and drawn over it, so where they coincide every colour still shows.
    styles = ("-", "--", "-.", ":")
    markers = ("o", "s", "^", "D", "v")
    for index, report in enumerate(reports):
        run = report.run
        if run is None or not run.live_bytes:
            continue
        # Zero is the live set right after the warm-up collection.
        baseline = [c.live_after for c in run.collections if c.step == run.warmup]
        base = baseline[0] if baseline else run.live_bytes[0]
        # Only tracked steps: an untracked step adds nothing the tracker could see.
        points = [(s, b) for s, (b, on) in enumerate(zip(run.live_bytes, run.step_tracked), 1) if on]
        line, = ax.plot([s for s, _ in points], [(b - base) / 1024 for _, b in points], lw=max(0.8, 3.6 - 0.35 * index),
                        ls=styles[index % len(styles)], alpha=0.85,
                        label=f"{report.name} ({report.verdict.value}"
                              + (f", 1 step in {report.track_every} tracked" if report.track_every > 1 else "")
                              + (f", all from step {report.dense_from}" if report.dense_from else "") + ")")
        cs = run.collections
        ax.plot([c.step for c in cs], [(c.live_after - base) / 1024 for c in cs], markers[index % len(markers)],
                ms=4, mfc="none", color=line.get_color())
    ax.axvline(reports[0].warmup if reports else 0, color="grey", ls=":", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("live tensor KiB above warm-up")
    ax.text(0.01, 0.98, "line: after each tracked step (collector paused); dots: after gc.collect()",
            transform=ax.transAxes, va="top", fontsize=8)
    ax.set_title("gradlint probe: live tensor memory per step")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, 0.94))
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=110)
    plt.close(fig)


def _by_line(sites: list[str]) -> list[str]:
    """"file:line (op)" sites with one line each: the ops made on one line share it. Tensors a
    library made for the user's call are charged to that call's line (tracker._user_line), so a
    `super().compute_loss(...)` line read twice, once for the logits' `mm` and once for the loss's `div`."""
    ops: dict[str, list[str]] = {}
    for site in sites:
        where, _, op = site.partition(" (")
        ops.setdefault(where, [])
        if op and op.rstrip(")") not in ops[where]:
            ops[where].append(op.rstrip(")"))
    return [f"{where} ({', '.join(names)})" if names else where for where, names in ops.items()]
