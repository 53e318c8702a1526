"""torchrun: `torchrun --nproc-per-node 2 -m gradlint probe train.py`, for real, 2 processes on
loopback with gloo: one report and one JSON file per rank, and a rank-0 summary with the skew."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).parent / "probe_targets" / "scripts" / "train_ddp.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_probe(tmp_path: Path, env: dict[str, str], *probe_args: str) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node 2 -m gradlint probe train_ddp.py --steps 40 --quiet ARGS` in tmp_path."""
    shutil.copy(SCRIPT, tmp_path / "train_ddp.py")
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
         "--master-port", str(_free_port()), "-m", "gradlint", "probe", "train_ddp.py", "--steps", "40", "--quiet",
         *probe_args],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, **env, "OMP_NUM_THREADS": "1"},
        check=False)  # a leaking rank exits 1: the tests read the outcome


@pytest.mark.slow
def test_two_ranks_report_each_and_rank_0_sums_up_with_the_skew(tmp_path):
    proc = _torchrun_probe(tmp_path, {"KEEP_ON_RANK1": "1"}, "--json", "probe-{rank}.json")
    out = proc.stdout
    assert "train_ddp.py [rank 0] (40/40 steps" in out and "train_ddp.py [rank 1] (40/40 steps" in out, out + proc.stderr
    assert "gradlint probe: torchrun summary (2 of 2 ranks reported)" in out
    assert "  rank 0: clean (40 steps)" in out
    assert "  rank 1: retained  4 B/step  held by debug (40 steps)" in out
    assert "skew: the ranks disagree (rank 0 clean, rank 1 retained)" in out
    # no two ranks wrote one file: {rank} in the path, the rank in the JSON
    reports = {r: json.loads((tmp_path / f"probe-{r}.json").read_text())["reports"][0] for r in (0, 1)}
    assert reports[0]["rank"] == 0 and reports[0]["verdict"] == "clean"
    assert reports[1]["rank"] == 1 and reports[1]["verdict"] == "retained"
    assert reports[1]["holders"][0]["subject"] == "debug"
    assert proc.returncode != 0  # rank 1 leaked: its exit 1 is torchrun's failure


@pytest.mark.slow
def test_ranks_leaking_at_different_rates_get_a_skew_by_bytes_and_files_of_their_own(tmp_path):
    proc = _torchrun_probe(tmp_path, {"KEEP_BY_RANK": "1"}, "--json", "probe.json", "--plot", "memory-{rank}.png")
    out = proc.stdout
    assert "gradlint probe: torchrun summary (2 of 2 ranks reported)" in out, out + proc.stderr
    assert "  rank 0: retained  64 B/step  held by seen (40 steps)" in out
    assert "  rank 1: retained  128 B/step  held by seen (40 steps)" in out
    assert "  skew: rank 1 leaks 128 B/step, rank 0 64 B/step" in out
    # A path without {rank}: `.rankN` before the suffix; with it, the rank. No two ranks share a file.
    reports = {r: json.loads((tmp_path / f"probe.rank{r}.json").read_text())["reports"][0] for r in (0, 1)}
    assert [reports[r]["rank"] for r in (0, 1)] == [0, 1]
    assert [reports[r]["bytes_per_step"] for r in (0, 1)] == pytest.approx([64.0, 128.0], abs=1)
    assert not (tmp_path / "probe.json").exists()
    for r in (0, 1):
        assert (tmp_path / f"memory-{r}.png").read_bytes().startswith(b"\x89PNG")
