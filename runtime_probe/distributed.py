"""torchrun: each rank probes its own process and reports; rank 0 prints a summary of all ranks.

The ranks exchange their verdicts through small files in a folder named by the torchrun run
(TORCHELASTIC_RUN_ID and the rendezvous address), not through torch.distributed: by the time the
probe stops the script, a rank's process group may be gone or mid-collective, and a collective
with a rank that raised would hang. Rank 0 waits for the others' files up to `WAIT_S`.
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
            "holder": report.holders[0].subject if report.holders else ""}


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


def summary_text(entries: dict[int, dict], world: int) -> str:
    from .progress import human_bytes

    lines = [f"gradlint probe: torchrun summary ({len(entries)} of {world} ranks reported)"]
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
