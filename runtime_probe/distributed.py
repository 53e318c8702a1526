"""Several ranks: each probes its own process and reports; rank 0 prints a summary of all ranks.

Script mode under torchrun (`gather`): the ranks exchange their verdicts through small files in a
folder named by the torchrun run (TORCHELASTIC_RUN_ID and the rendezvous address), not through
torch.distributed: by the time the probe stops the script, a rank's process group may be gone or
mid-collective, and a collective with a rank that raised would hang. Rank 0 waits for the others'
files up to `WAIT_S`.

The Lightning and Hugging Face callbacks (`exchange`): every rank finishes its probe at the same
optimizer step of a live process group, so one all_gather_object carries every rank's entry and
report text. Without it rank 0 printed its own report only: a leak on rank 1 read "clean", and
`on_leak="stop"` stopped the leaking rank alone, leaving the others waiting in its all-reduce.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

WAIT_S = 120.0


def _folder() -> str:
    run = "-".join(os.environ.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"))
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run)
    return os.path.join(tempfile.gettempdir(), f"gradlint-probe-{os.getuid() if hasattr(os, 'getuid') else 0}-{safe}")


def _entry(report, rank: int) -> dict:
    return {"rank": rank, "verdict": report.verdict.value, "bytes_per_step": report.bytes_per_step,
            "graph_nodes_per_step": report.graph_nodes_per_step, "steps_done": report.steps_done,
            "holder": report.holders[0].subject if report.holders else "", "leak": report.is_leak}


def exchange(report, text: str) -> list[dict] | None:
    """Every rank's entry (with its report `text`), in rank order, through torch.distributed's
    default group; None without one of two or more ranks. A collective: every rank calls it at
    the same point, or it waits."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    entries: list = [None] * dist.get_world_size()
    dist.all_gather_object(entries, {**_entry(report, dist.get_rank()), "text": text})
    return entries


def other_ranks_leak(entries: list[dict] | None, rank: int, report) -> str:
    """The error a rank that does not leak raises when another does and the probe fails the run."""
    leaking = [str(e["rank"]) for e in entries or () if e["leak"]]
    where = f"rank {', '.join(leaking)}" if leaking else "another rank"
    return (f"gradlint probe: the training step leaks on {where} (this is rank {rank}: {report.verdict.value}); "
            "that rank's LeakError has the report")


def rank_zero_text(entries: list[dict]) -> str:
    """What rank 0 prints for all ranks: its own report, each other rank's that leaks (its holders
    and lines are on that rank only), then the summary with the skew."""
    shown = [e["text"] for e in entries if e["rank"] == 0 or e["leak"]]
    return "".join(t if t.endswith("\n") else t + "\n" for t in shown) + summary_text(
        {e["rank"]: e for e in entries}, len(entries), kind="DDP")


def gather(report, rank: int, world: int | None = None, folder: str | None = None) -> str:
    """Write this rank's entry; on rank 0, wait for every rank's and return the summary text."""
    world = world if world is not None else int(os.environ.get("WORLD_SIZE", "1"))
    folder = folder or _folder()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(_entry(report, rank), f)
    os.replace(path + ".tmp", path)  # whole or absent: rank 0 never reads half a file
    if rank != 0:
        return ""
    deadline = time.monotonic() + WAIT_S
    entries: dict[int, dict] = {}
    while time.monotonic() < deadline:
        for r in range(world):
            if r not in entries:
                try:
                    with open(os.path.join(folder, f"rank{r}.json")) as f:
                        entries[r] = json.load(f)
                except (OSError, ValueError):
                    pass
        if len(entries) == world:
            break
        time.sleep(0.1)
    for r in entries:
        try:
            os.remove(os.path.join(folder, f"rank{r}.json"))
        except OSError:
            pass
    try:
        os.rmdir(folder)
    except OSError:
        pass
    return summary_text(entries, world)


def summary_text(entries: dict[int, dict], world: int, kind: str = "torchrun") -> str:
    from .progress import human_bytes

    lines = [f"gradlint probe: {kind} summary ({len(entries)} of {world} ranks reported)"]
    for r in range(world):
        e = entries.get(r)
        if e is None:
            lines.append(f"  rank {r}: no report (it did not finish within {WAIT_S:.0f} s)")
            continue
        growth = f"  {human_bytes(e['bytes_per_step'])}/step" if e["verdict"] in ("retained", "delayed-free") else ""
        held = f"  held by {e['holder']}" if e["holder"] and growth else ""
        lines.append(f"  rank {r}: {e['verdict']}{growth}{held} ({e['steps_done']} steps)")
    verdicts = {e["verdict"] for e in entries.values()}
    rates = [e["bytes_per_step"] for e in entries.values()]
    if len(verdicts) > 1:
        lines.append("  skew: the ranks disagree (" + ", ".join(
            f"rank {r} {entries[r]['verdict']}" for r in sorted(entries)) + "): the leak is on some ranks only "
            "(rank-0-only logging, a per-rank cache)")
    elif rates and max(rates) > 0 and max(rates) > 1.5 * max(min(rates), 1e-9):
        top = max(entries, key=lambda r: entries[r]["bytes_per_step"])
        low = min(entries, key=lambda r: entries[r]["bytes_per_step"])
        lines.append(f"  skew: rank {top} leaks {human_bytes(entries[top]['bytes_per_step'])}/step, "
                     f"rank {low} {human_bytes(entries[low]['bytes_per_step'])}/step")
    return "\n".join(lines) + "\n"
