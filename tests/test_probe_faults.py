"""`gradlint probe` under faults, driven as a user's shell drives it: a subprocess and real signals.

Each target is written here. A target that waits for a signal first leaves a marker file (or a
line on stderr) and then blocks, so the signal is sent at a known point, never after a sleep
that races the probe; every wait ends by itself, so a probe that misbehaves fails, not hangs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

# The probe starts torch in each subprocess: generous, for a loaded 2-core machine.
START_S = 120
# A blocked target gives up after this long: longer than any wait below.
BLOCK_S = 90

LEAKY = """
import os, sys, time
import torch

kept = []  # one 256-float tensor (1 KiB) kept per step: a leak the probe measures
calls = [0]


def block(marker):
    open(marker, "w").close()
    deadline = time.monotonic() + {block}
    while time.monotonic() < deadline:
        time.sleep(0.02)
"""


def write_target(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(LEAKY.format(block=BLOCK_S) + textwrap.dedent(body))
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _default_sigint() -> None:
    # A process started in the background by a non-interactive shell inherits SIGINT ignored, and
    # Python then installs no handler; Ctrl-C at a terminal finds the default one.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Probe:
    """`python -m gradlint probe ...` running, its stdout and stderr collected as they arrive."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "gradlint", "probe", *args], cwd=tmp_path,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})},
                                     preexec_fn=_default_sigint)  # noqa: PLW1509 - before the readers start
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        lines.extend(stream)  # line by line, as the probe writes them

    def wait_until(self, ready, what: str, timeout: float = START_S) -> None:
        """Until ready() holds; fails when the probe exits first or the time is up."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                self.finish()
                pytest.fail(f"the probe exited ({self.proc.returncode}) before {what}:\n{self.text()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                self.finish()
                pytest.fail(f"no {what} after {timeout} s:\n{self.text()}")
            time.sleep(0.02)

    def wait_for_file(self, path: Path) -> None:
        self.wait_until(path.exists, f"marker {path.name}")

    def wait_for_line(self, lines: list[str], text: str) -> None:
        self.wait_until(lambda: any(text in line for line in lines), repr(text))

    def finish(self, timeout: float = START_S) -> tuple[int, str, str]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for reader in self._readers:
            reader.join(10)
        return self.proc.returncode, "".join(self.out), "".join(self.err)

    def text(self) -> str:
        return f"stdout:\n{''.join(self.out)}\nstderr:\n{''.join(self.err)}"


def run_probe(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    return Probe(tmp_path, *args).finish()


# 1. A BaseException subclass that is neither KeyboardInterrupt nor SystemExit.

CANCELLED = """
class Cancelled(BaseException):
    # What a framework raises to abort a run: not an Exception, so `except Exception` passes it on.
    pass


def step():
    calls[0] += 1
    kept.append(torch.randn(256))
    if calls[0] == 40:
        raise Cancelled("the run was cancelled by its owner")
"""


def test_a_step_raising_a_base_exception_is_a_failed_step_with_what_was_measured_before(tmp_path):
    target = write_target(tmp_path, CANCELLED)
    code, out, err = run_probe(tmp_path, f"{target}:step", "--steps", "60", "--track-every", "1", "--quiet")
    assert code == 1, out + err
    assert "Traceback" not in err
    assert "  verdict: error\n" in out
    where = f"train.py:{line_of(target, 'raise Cancelled')}"  # relative: the probe runs in tmp_path
    assert f"  step 40 raised at {where}: Cancelled: the run was cancelled by its owner\n" in out
    # The 29 steps after warm-up measured the leak before step 40 failed.
    assert re.search(r"  measured before step 40 \(a partial report\): retained  1\.\d KiB/step\n", out), out
    assert "  held by kept: module-level list 'kept'" in out


def test_an_import_raising_a_base_exception_is_one_line_and_exit_2(tmp_path):
    target = tmp_path / "setup_cancelled.py"
    target.write_text(textwrap.dedent("""
        class Cancelled(BaseException):
            pass

        raise Cancelled("no GPU quota left")

        def step():
            pass
    """))
    assert run_probe(tmp_path, f"{target}:step", "--steps", "20", "--quiet") == (
        2, "", f"gradlint probe: error: importing {target} raised Cancelled: no GPU quota left\n")


# 2. SIGTERM, what a batch scheduler sends at its time limit.

BLOCKS_AT_STEP_25 = """
def step():
    calls[0] += 1
    if os.environ.get("LEAK"):
        kept.append(torch.randn(256))
    if calls[0] == 25:
        block({marker!r})
"""


def _blocking_target(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "step_25_started"
    return write_target(tmp_path, BLOCKS_AT_STEP_25.format(marker=str(marker))), marker


def _signal_at_step_25(tmp_path: Path, signum: int, *args: str, leak: bool = False) -> tuple[int, str, str]:
    target, marker = _blocking_target(tmp_path)
    probe = Probe(tmp_path, f"{target}:step", "--steps", "60", "--track-every", "1", "--quiet", *args,
                  env={"LEAK": "1" if leak else ""})
    probe.wait_for_file(marker)
    probe.proc.send_signal(signum)
    return probe.finish()


def test_sigterm_during_the_steps_prints_the_partial_report_and_exits_143(tmp_path):
    out_json = tmp_path / "probe.json"
    code, out, err = _signal_at_step_25(tmp_path, signal.SIGTERM, "--json", str(out_json))
    assert code == 143, out + err
    assert "(24/60 steps, 10 warm-up" in out
    assert "  interrupted by SIGTERM after step 24: a partial report\n  verdict: clean\n" in out
    assert "Traceback" not in err
    report = json.loads(out_json.read_text())["reports"][0]
    assert (report["interrupted"], report["interrupted_by"], report["steps_done"]) == (True, "SIGTERM", 24)


def test_sigterm_after_a_leak_was_seen_exits_1_naming_it(tmp_path):
    # As after Ctrl-C, a leak already measured is the result: exit 1, the holder named.
    code, out, err = _signal_at_step_25(tmp_path, signal.SIGTERM, leak=True)
    assert code == 1, out + err
    assert "  interrupted by SIGTERM after step 24: a partial report\n  verdict: retained  " in out
    assert "  held by kept: module-level list 'kept'" in out and "    1.0 KiB/step, retained\n" in out


# 3. SIGINT (Ctrl-C) while the target is imported, and during the steps.

def test_sigint_during_the_import_is_one_line_and_exits_130(tmp_path):
    marker = tmp_path / "importing"
    target = write_target(tmp_path, f"""
        block({str(marker)!r})  # the set-up: loading data


        def step():
            pass
    """)
    probe = Probe(tmp_path, f"{target}:step", "--steps", "20", "--quiet")
    probe.wait_for_file(marker)
    probe.proc.send_signal(signal.SIGINT)
    code, out, err = probe.finish()
    message = f"gradlint probe: interrupted by SIGINT while importing {target}: no step ran\n"
    assert (code, out, err) == (130, "", message)


def test_sigint_during_the_steps_prints_the_partial_report_and_exits_130(tmp_path):
    code, out, err = _signal_at_step_25(tmp_path, signal.SIGINT)
    assert code == 130, out + err
    assert "  interrupted by SIGINT after step 24: a partial report\n  verdict: clean\n" in out
    assert "Aborted!" not in err and "Traceback" not in err


# 4. A step that runs out of memory, after steps that leaked.

@pytest.mark.parametrize("raise_it", [
    "raise MemoryError()",
    "raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')",
    ("raise RuntimeError(\"[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
     "you tried to allocate 1099511627776 bytes.\")"),
], ids=["MemoryError", "torch.OutOfMemoryError", "cpu-allocator"])
def test_a_step_out_of_memory_reports_the_leak_measured_before_it(tmp_path, raise_it):
    # Nothing is allocated for real: the step raises what the allocator would, after 39 steps that leak.
    target = write_target(tmp_path, f"""
        def step():
            calls[0] += 1
            if calls[0] == 40:
                {raise_it}
            kept.append(torch.randn(256))
    """)
    code, out, err = run_probe(tmp_path, f"{target}:step", "--steps", "60", "--track-every", "1", "--quiet")
    assert code == 1, out + err
    assert "Traceback" not in err
    assert "  why: step 40 ran out of memory (" in out
    assert re.search(r"; the steps before it leak 10\d\d B/step \(retained\): a likely cause\n", out), out
    assert re.search(r"  measured before step 40 \(a partial report\): retained  1\.\d KiB/step\n", out), out
    assert "  held by kept: module-level list 'kept'" in out
    assert "memory now free is gone after" not in out  # no countdown to what already happened


# 5. The import's output while it runs, and a sign of life from a slow one.

WAITS_AT_IMPORT = """
print("{say}", file=sys.stderr)
print("{say} (stdout)")
# Waits for the test to have seen the line, then goes on; alone, it gives up.
deadline = time.monotonic() + {block}
while not os.path.exists({marker!r}):
    if time.monotonic() > deadline:
        raise SystemExit("nobody saw the set-up's output while it ran")
    time.sleep(0.02)


def step():
    pass
"""


def _waiting_import(tmp_path: Path, say: str) -> tuple[Path, Path]:
    marker = tmp_path / "seen"
    return write_target(tmp_path, WAITS_AT_IMPORT.format(say=say, block=BLOCK_S, marker=str(marker))), marker


def test_what_the_import_prints_shows_while_it_runs(tmp_path):
    target, marker = _waiting_import(tmp_path, "loading shard 1 of 8")
    probe = Probe(tmp_path, f"{target}:step", "--steps", "20", "--quiet")
    probe.wait_for_line(probe.err, "loading shard 1 of 8\n")
    probe.wait_for_line(probe.out, "loading shard 1 of 8 (stdout)\n")
    marker.touch()
    code, out, err = probe.finish()
    assert code == 0, out + err
    assert out.startswith("loading shard 1 of 8 (stdout)\n") and "  verdict: clean\n" in out


def test_a_slow_import_under_quiet_writes_no_notice_and_its_report_is_whole(tmp_path):
    # --quiet in a pipe: no progress and no "still running" line (test_probe_cli shows it on a terminal).
    target, marker = _waiting_import(tmp_path, "loading")
    out_json = tmp_path / "probe.json"
    probe = Probe(tmp_path, f"{target}:step", "--steps", "20", "--quiet", "--json", str(out_json))
    probe.wait_for_line(probe.err, "loading\n")
    time.sleep(3.5)  # past progress.WAIT_NOTICE_S
    marker.touch()
    code, out, err = probe.finish()
    assert code == 0, out + err
    assert "still running" not in out + err
    assert json.loads(out_json.read_text())["reports"][0]["verdict"] == "clean"
