"""The Lightning and Hugging Face callbacks under DDP, for real: 2 processes on loopback with gloo
(tests/integration_targets/lit_ddp.py, hf_ddp.py), rank 1 keeping a per-rank debug list. Rank 0
shows every rank's verdict, and a leak on one rank stops or fails every rank, so none is left
waiting in an all-reduce (a rank stopping alone would hang the others)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

TARGETS = Path(__file__).parent / "integration_targets"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _results(out: str) -> dict[int, dict[str, str]]:
    """Each rank's RESULT line: verdict, the global step it ended at, what the fit raised, entries seen."""
    rows = {}
    # found anywhere in a line: the ranks' other output shares the pipe
    for rank, rest in re.findall(r"RESULT rank=(\d) ((?:(?:verdict|step|raised)=[\w-]+ )*ranks=\d)", out):
        rows[int(rank)] = dict(f.split("=", 1) for f in rest.split())
    return rows


def _run(command: list[str], cwd: Path, leak: bool) -> tuple[subprocess.CompletedProcess, str, dict]:
    """The finished run, its whole output (for assertion messages) and each rank's RESULT line."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    env.pop("LEAK_ON_RANK1", None)
    if leak:
        env["LEAK_ON_RANK1"] = "1"
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    return proc, proc.stdout + proc.stderr, _results(proc.stdout)


def _lightning(tmp_path: Path, on_leak: str, leak: bool = True) -> tuple[subprocess.CompletedProcess, str, dict]:
    pytest.importorskip("lightning", reason="needs Lightning: pip install -e '.[test]'")
    return _run([sys.executable, str(TARGETS / "lit_ddp.py"), on_leak], tmp_path, leak)


def _huggingface(tmp_path: Path, on_leak: str, leak: bool = True) -> tuple[subprocess.CompletedProcess, str, dict]:
    pytest.importorskip("transformers", reason="needs transformers: pip install -e '.[test]'")
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate: pip install -e '.[test]'")
    return _run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                 "--master-port", str(_free_port()), str(TARGETS / "hf_ddp.py"), str(tmp_path / "out"), on_leak],
                tmp_path, leak)


RUNS = {"lightning": (_lightning, "DebugListRegressor.training_step", "DebugListRegressor.debug"),
        "huggingface": (_huggingface, "Regressor (Trainer.train)", "DebugListTrainer.debug")}


@pytest.mark.slow
@pytest.mark.parametrize("framework", RUNS)
def test_a_leak_on_rank_1_is_shown_by_rank_0_and_stops_every_rank(framework, tmp_path):
    run, name, holder = RUNS[framework]
    proc, out, results = run(tmp_path, "stop")
    assert proc.returncode == 0 and set(results) == {0, 1}, out
    assert results[0]["verdict"] == "clean" and results[1]["verdict"] == "retained", out
    # both ranks stopped at the last probed step: none went on alone into an all-reduce
    assert results[0]["step"] == results[1]["step"] == "40", out
    assert results[0]["ranks"] == results[1]["ranks"] == "2"
    # rank 0 printed its own report, rank 1's (with its holder), and the summary, once each
    assert out.count(f"gradlint probe: {name} [rank 0] (40/40 steps") == 1, out
    assert out.count(f"gradlint probe: {name} [rank 1] (40/40 steps") == 1, out
    assert re.search(rf"held by {re.escape(holder)}\b", out), out
    assert "gradlint probe: DDP summary (2 of 2 ranks reported)" in out
    assert "  rank 0: clean (40 steps)" in out
    assert re.search(rf"  rank 1: retained  \d+ B/step  held by {re.escape(holder)} \(40 steps\)", out), out
    assert "skew: the ranks disagree (rank 0 clean, rank 1 retained)" in out


@pytest.mark.slow
@pytest.mark.parametrize("framework", RUNS)
def test_with_on_leak_raise_the_leaking_rank_raises_the_report_and_the_others_name_it(framework, tmp_path):
    run, _, _ = RUNS[framework]
    proc, out, results = run(tmp_path, "raise")
    assert set(results) == {0, 1}, out
    assert results[1]["raised"] == "LeakError" and results[0]["raised"] == "RuntimeError", out
    assert results[0]["step"] == results[1]["step"] == "40", out
    assert "gradlint probe: DDP summary (2 of 2 ranks reported)" in out


@pytest.mark.slow
def test_clean_ranks_under_ddp_are_summed_up_without_a_skew_and_the_fit_goes_on(tmp_path):
    proc, out, results = _lightning(tmp_path, "stop", leak=False)
    assert proc.returncode == 0 and {r["verdict"] for r in results.values()} == {"clean"}, out
    assert results[0]["step"] == results[1]["step"] == "80", out  # the whole epoch: on_leak="stop" had no leak
    assert "  rank 0: clean (40 steps)" in out and "  rank 1: clean (40 steps)" in out
    assert "skew" not in out and "[rank 1] (40/40" not in out  # a clean rank's report is its own log's
