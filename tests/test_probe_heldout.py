"""The held-out check (issue 18): training scripts written for it in different styles
(tests/heldout_probe/), half leaking, half clean but tricky, each with the verdict and the holder a
user would clear decided by reading it (EXPECTED.toml). Each runs 3 times, as a user runs it:
`gradlint probe SCRIPT` for plain scripts, `python SCRIPT` for the ones that drive the Lightning
or Hugging Face callback themselves, `torchrun --nproc-per-node 2 -m gradlint probe SCRIPT` for
DDP. Every run must give the expected verdict, and every leak's first holder must be the expected
one. The runs go three at a time; the table of all of them is printed on failure."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the README's Quick start promises 3.10+
    import tomli as tomllib

pytest.importorskip("torch")

HERE = Path(__file__).parent / "heldout_probe"
EXPECTED = tomllib.loads((HERE / "EXPECTED.toml").read_text())["script"]
RUNS = 3
STEPS = 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _needs(entry: dict) -> str | None:
    """The package a script needs that is not installed, if any."""
    import importlib.util

    for module in ("lightning", "transformers"):
        if module in (HERE / entry["file"]).read_text() and importlib.util.find_spec(module) is None:
            return module
    return None


def _run(entry: dict, attempt: int, folder: Path) -> list[dict]:
    """One run of one script: the reports it wrote (one per rank)."""
    work = folder / f"{Path(entry['file']).stem}-{attempt}"
    work.mkdir()
    for file in HERE.glob("*.py"):
        shutil.copy(file, work / file.name)
    steps = str(entry.get("steps", STEPS))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GL_HELDOUT_JSON": str(work / "report.json")}
    if entry["run"] == "callback":
        command = [sys.executable, entry["file"]]
    elif entry["run"] == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                   "--master-port", str(_free_port()), "-m", "gradlint", "probe", entry["file"], "--steps", steps,
                   "--quiet", "--json", "report-{rank}.json"]
    else:
        command = [sys.executable, "-m", "gradlint", "probe", entry["file"], "--steps", steps, "--quiet",
                   "--json", "report.json"]
        if entry.get("args"):
            command += ["--", *entry["args"]]
    proc = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=600, env=env, check=False)
    files = sorted(work.glob("report*.json"))
    if not files:
        last = ((proc.stderr or proc.stdout).strip().splitlines() or [""])[-1]
        return [{"verdict": f"no report (exit {proc.returncode}: {last[:200]})", "holders": []}]
    return [json.loads(f.read_text())["reports"][0] for f in files]


def _holder_ok(report: dict, expected: str) -> bool:
    if not expected:
        return True
    holders = report.get("holders") or []
    return bool(holders) and expected in [holders[0]["subject"], *holders[0].get("aliases", [])]


@pytest.mark.slow
def test_every_held_out_script_gets_its_verdict_and_holder_in_every_run(tmp_path):
    entries = [e for e in EXPECTED if _needs(e) is None]
    assert len(entries) >= 12, "fewer than 12 held-out scripts can run here"
    jobs = [(e, attempt) for e in entries for attempt in range(RUNS)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda job: _run(*job, tmp_path), jobs))
    table, failures = [], []
    for entry in entries:
        runs = [r for (e, _), r in zip(jobs, results) if e is entry]
        got = []
        for reports in runs:
            for report in reports:
                holder = (report.get("holders") or [{}])[0].get("subject", "") or "-"
                ok = report["verdict"] == entry["verdict"] and _holder_ok(report, entry["holder"])
                rank = f"[rank {report['rank']}] " if report.get("rank") is not None else ""
                got.append(f"{rank}{report['verdict']} {holder if report['verdict'] != 'clean' else ''}".strip()
                           + ("" if ok else " (WRONG)"))
                if not ok:
                    failures.append(entry["file"])
        table.append(f"{entry['file']:<32} expected {entry['verdict']} {entry['holder'] or ''}".rstrip()
                     + f" | got: {'; '.join(got)}")
    text = "\n".join(table)
    print(text)
    (Path(os.environ.get("GL_HELDOUT_TABLE", tmp_path / "table.txt"))).write_text(text + "\n")
    assert not failures, f"wrong in {sorted(set(failures))}:\n{text}"
