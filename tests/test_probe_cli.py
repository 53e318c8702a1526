"""`gradlint probe` through click's runner: exit codes, one-line usage errors, outputs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradlint.runtime_probe.cli import probe

STEPS = Path(__file__).parent / "probe_targets" / "train_steps.py"


def run(*args: str):
    return CliRunner().invoke(probe, list(args))


@pytest.mark.parametrize(("spec", "message"), [
    ("missing_file.py:step", "gradlint probe: error: no such file: missing_file.py\n"),
    (f"{STEPS}:no_such_step", f"gradlint probe: error: {STEPS} has no attribute 'no_such_step'\n"),
    (f"{STEPS}:NOT_A_STEP", f"gradlint probe: error: {STEPS}:NOT_A_STEP is not callable (it is a int)\n"),
    ("no_such_package.train:step", "gradlint probe: error: no module named 'no_such_package.train'\n"),
    # a bare FILE.py is a script to run (script mode), so a missing one is a missing file
    ("train.py", "gradlint probe: error: no such file: train.py\n"),
    ("train", "gradlint probe: error: target 'train' must be FILE.py:FUNCTION or package.module:FUNCTION\n"),
    (f"{STEPS}:generator_step", f"gradlint probe: error: {STEPS}:generator_step is a generator function: calling it "
                                "runs none of its body; probe a plain function that runs one step\n"),
])
def test_a_target_that_cannot_be_loaded_is_one_line_and_exit_2(spec, message):
    pytest.importorskip("torch")
    result = run(spec, "--steps", "5")
    assert result.exit_code == 2
    assert result.output == message  # no traceback


def test_a_leaky_target_exits_1_names_the_holder_and_confirms_the_static_finding():
    pytest.importorskip("torch")
    result = run(f"{STEPS}:keep_losses", "--steps", "60", "--quiet")
    assert result.exit_code == 1, result.output
    assert "verdict: retained  4 B/step" in result.output
    assert "held by losses: module-level list 'losses'" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("losses "))
    assert "GL103 at" in row and row.rstrip().endswith("confirmed")


def test_a_clean_target_exits_0_and_shows_unmeasured_static_findings_honestly():
    pytest.importorskip("torch")
    result = run(f"{STEPS}:clean_step", "--steps", "40", "--quiet")
    assert result.exit_code == 0, result.output
    assert "verdict: clean" in result.output
    assert "static-only" in result.output and "runtime-only" not in result.output


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_track_every_is_a_usage_error(value):
    result = run(f"{STEPS}:clean_step", "--track-every", value)
    assert result.exit_code == 2
    assert len(result.output.splitlines()) == 1
    assert result.output.startswith("gradlint probe: error: invalid value for '--track-every': ")


def test_a_stride_is_shown_in_the_report_header():
    pytest.importorskip("torch")
    result = run(f"{STEPS}:keep_losses", "--steps", "100", "--track-every", "4", "--quiet")
    assert result.exit_code == 1, result.output
    assert "tracking 1 step in 4)" in result.output and "verdict: retained  4 B/step" in result.output
    assert re.search(r"step: median [\d.]+ ms under the probe \([\d.]+ ms when tracked\)", result.output)


def test_a_raising_step_exits_1_with_the_step_number():
    pytest.importorskip("torch")
    result = run(f"{STEPS}:raising_step", "--steps", "20", "--quiet")
    assert result.exit_code == 1
    assert "step 7 raised at" in result.output and "ValueError: batch 7 is empty" in result.output


def test_json_and_plot_outputs(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    out_json, out_png = tmp_path / "probe.json", tmp_path / "probe.png"
    result = run(f"{STEPS}:output_on_ctx", "--steps", "40", "--gc-every", "5", "--warmup", "5", "--quiet",
                 "--json", str(out_json), "--plot", str(out_png))
    assert result.exit_code == 1, result.output
    data = json.loads(out_json.read_text())
    (report,) = data["reports"]
    assert report["verdict"] == "delayed-free" and report["gc_every"] == 5 and report["warmup"] == 5
    assert len(report["series"]["live_bytes"]) == 40
    assert data["cross_check"][0]["holder"] == "ScatterMean.ctx.out"
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install_it(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = run(f"{STEPS}:clean_step", "--plot", str(tmp_path / "p.png"))
    assert result.exit_code == 2
    assert result.output == ("gradlint probe: error: --plot needs matplotlib: "
                             "pip install 'torch-gradlint[plot]' (or pip install matplotlib)\n")


def test_device_cuda_without_cuda_is_a_usage_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    result = run(f"{STEPS}:clean_step", "--device", "cuda")
    assert result.exit_code == 2 and "no usable CUDA device" in result.output


def test_without_torch_the_probe_says_so_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    result = run(f"{STEPS}:clean_step")
    assert result.exit_code == 2
    assert result.output == "gradlint probe: error: the probe needs PyTorch: pip install 'torch-gradlint[torch]' (or pip install torch)\n"


def test_importing_the_probe_command_does_not_import_torch():
    code = "import sys, gradlint.runtime_probe.cli, gradlint.runtime_probe; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


CLI_STEPS = Path(__file__).parent / "probe_targets" / "cli_steps.py"
TARGETS = Path(__file__).parent / "probe_targets"


def test_the_console_script_finds_a_package_in_the_current_directory():
    pytest.importorskip("torch")
    script = Path(sys.executable).parent / "gradlint"
    if not script.exists():
        pytest.skip("gradlint is not installed as a console script beside this python")
    # The console script's sys.path[0] is its bin directory: only the fix puts the project root first.
    result = subprocess.run([str(script), "probe", "cli_pkg.train:step", "--steps", "20", "--quiet"],
                            cwd=TARGETS, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  verdict: clean\n" in result.stdout


@pytest.mark.parametrize(("option", "name", "message"), [
    ("--json", "missing/probe.json", "--json {path}: directory {parent} does not exist"),
    ("--plot", "missing/probe.png", "--plot {path}: directory {parent} does not exist"),
    ("--json", "a_file/probe.json", "--json {path}: {parent} is not a directory"),
    ("--plot", "probe.txt", "--plot {path}: the plot is a PNG, name it *.png"),
    ("--plot", "probe", "--plot {path}: the plot is a PNG, name it *.png"),
])
def test_an_output_that_cannot_be_written_is_a_usage_error_before_any_step(tmp_path, option, name, message):
    pytest.importorskip("torch")
    if option == "--plot":
        pytest.importorskip("matplotlib")
    (tmp_path / "a_file").write_text("")
    path = tmp_path / name
    # raising_step fails at step 7: a usage error exits 2 before it, not 1 after it.
    result = run(f"{STEPS}:raising_step", "--steps", "20", "--quiet", option, str(path))
    expected = message.format(path=path, parent=path.parent)
    assert (result.exit_code, result.output) == (2, f"gradlint probe: error: {expected}\n")


def test_a_json_write_that_fails_after_the_run_is_one_line_after_the_report(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from gradlint.runtime_probe import report

    def disk_full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "write_json", disk_full)
    out = tmp_path / "probe.json"
    result = run(f"{STEPS}:clean_step", "--steps", "20", "--quiet", "--json", str(out))
    assert result.exit_code == 2
    assert "verdict: clean" in result.output and "Traceback" not in result.output
    assert result.output.endswith(f"gradlint probe: error: --json {out}: No space left on device\n")


def test_a_target_that_exits_while_imported_is_a_usage_error():
    pytest.importorskip("torch")
    target = TARGETS / "cli_import_exits.py"
    result = run(f"{target}:step", "--steps", "5", "--quiet")
    assert (result.exit_code, result.output) == (2, f"gradlint probe: error: importing {target} called sys.exit(4)\n")


def test_argparse_at_import_is_one_line_naming_its_complaint_and_the_cause():
    pytest.importorskip("torch")
    target = TARGETS / "cli_import_argparse.py"
    result = run(f"{target}:step", "--steps", "5", "--quiet")
    # argparse's usage lines are held back: gradlint's line is the only one.
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    # argparse names the program after sys.argv[0]: "gradlint" from the console script.
    assert re.fullmatch(
        rf"gradlint probe: error: importing {re.escape(str(target))} called sys.exit\(2\) after printing "
        r"'\S+: error: the following arguments are required: --config'; argparse at import time sees "
        r"gradlint's own arguments: parse them under `if __name__ == \"__main__\":`", line), line


def test_what_a_target_prints_to_stderr_while_imported_is_kept_when_the_import_succeeds():
    pytest.importorskip("torch")
    result = run(f"{TARGETS / 'cli_import_warns.py'}:step", "--steps", "20", "--quiet")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("loading the dataset from disk\n") and "verdict: clean" in result.output


def test_a_package_target_that_exits_while_imported_is_a_usage_error(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(TARGETS))
    result = run("cli_import_exits:step", "--steps", "5", "--quiet")
    assert result.exit_code == 2
    assert result.output == "gradlint probe: error: importing cli_import_exits called sys.exit(4)\n"


def test_a_step_that_calls_sys_exit_is_an_error_verdict_with_the_report():
    pytest.importorskip("torch")
    result = run(f"{CLI_STEPS}:exits_at_5", "--steps", "20", "--quiet")
    assert result.exit_code == 1, result.output
    assert "verdict: error" in result.output
    assert "step 5 raised at" in result.output and "SystemExit: 3" in result.output


@pytest.mark.parametrize(("name", "arguments"), [
    ("step_with_batch", "batch"),
    ("step_with_keyword_lr", "lr"),
])
def test_a_step_that_needs_arguments_is_a_usage_error(name, arguments):
    pytest.importorskip("torch")
    result = run(f"{CLI_STEPS}:{name}", "--steps", "20", "--quiet")
    assert (result.exit_code, result.output) == (
        2, f"gradlint probe: error: {CLI_STEPS}:{name} takes arguments ({arguments}): the probe calls it with none\n")


def test_a_step_whose_arguments_all_have_defaults_runs():
    pytest.importorskip("torch")
    result = run(f"{CLI_STEPS}:step_with_defaults", "--steps", "20", "--quiet")
    assert result.exit_code == 0, result.output
    assert "verdict: clean" in result.output


def test_an_import_that_raises_is_one_line_and_exit_2():
    pytest.importorskip("torch")
    target = TARGETS / "cli_import_raises.py"
    result = run(f"{target}:step", "--steps", "5", "--quiet")
    assert (result.exit_code, result.output) == (
        2, f"gradlint probe: error: importing {target} raised ValueError: the dataset is empty\n")


def test_ctrl_c_during_a_clean_run_exits_130_with_a_partial_report():
    pytest.importorskip("torch")
    result = run(f"{CLI_STEPS}:interrupted_at_15", "--steps", "40", "--quiet")
    assert result.exit_code == 130, result.output
    assert "(14/40 steps" in result.output
    assert "interrupted after step 14: a partial report" in result.output and "verdict: clean" in result.output


def test_the_self_test_exits_1_when_a_scenario_does_not_match_what_it_declares(monkeypatch):
    pytest.importorskip("torch")
    from gradlint.runtime_probe import scenarios
    from gradlint.runtime_probe.selftest import load_scenario

    monkeypatch.setattr(scenarios, "NAMES", ("clean",))
    monkeypatch.setattr(load_scenario("clean"), "EXPECTED_VERDICT", "retained")
    result = run("--steps", "20", "--quiet")
    assert result.exit_code == 1, result.output
    assert result.output.startswith("FAIL clean               clean         (expected retained    )")
    assert "0 of 1 scenarios match what they declare; mismatched: clean" in result.output


@pytest.mark.parametrize(("quiet", "tty", "shown"), [((), True, True), (("--quiet",), True, False),
                                                  ((), False, False)])
def test_progress_shows_on_a_terminal_unless_quiet(quiet, tty, shown, monkeypatch):
    pytest.importorskip("torch")
    from gradlint.runtime_probe import progress

    monkeypatch.setattr(progress, "_isatty", lambda _stream: tty)
    result = run(f"{STEPS}:clean_step", "--steps", "20", *quiet)
    assert result.exit_code == 0, result.output
    # steps done, elapsed, live bytes; nothing of it in a log that is not a terminal
    assert bool(re.search(r"probing: step 20/20, [0-9.]+ s, live tensors [0-9.]+ \w?i?B", result.output)) is shown


SLOW_START = """
import time
import torch

time.sleep(1.0)  # the set-up: data loading, say
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def step():
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()


if __name__ == "__main__":
    for _ in range(30):
        step()
"""


@pytest.mark.parametrize(("quiet", "tty", "shown"), [((), True, True), (("--quiet",), True, False),
                                                  ((), False, False)])
@pytest.mark.parametrize("mode", ["step function", "script"])
def test_a_slow_start_says_it_is_still_running_on_a_terminal_unless_quiet(mode, quiet, tty, shown, tmp_path,
                                                                          monkeypatch):
    pytest.importorskip("torch")
    from gradlint.runtime_probe import progress

    monkeypatch.setattr(progress, "_isatty", lambda _stream: tty)
    monkeypatch.setattr(progress, "WAIT_NOTICE_S", 0.2)
    target = tmp_path / "slow_start.py"
    target.write_text(SLOW_START)
    args = [f"{target}:step"] if mode == "step function" else [str(target)]
    result = run(*args, "--steps", "20", *quiet)
    assert result.exit_code == 0, result.output
    notice = (f"gradlint probe: importing {target} (still running after 0.2 s)...\n" if mode == "step function" else
              f"gradlint probe: running {target}, no step finished yet (still running after 0.2 s)...\n")
    assert (notice in result.output) is shown, result.output
    assert result.output.count("still running") == int(shown)


def test_a_gc_interval_the_probe_lowers_is_noted_with_the_reason():
    pytest.importorskip("torch")
    # 30 measured steps: at least four collections means one every 7 steps at most.
    result = run(f"{STEPS}:clean_step", "--steps", "40", "--gc-every", "50", "--track-every", "1", "--quiet")
    assert result.exit_code == 0, result.output
    assert "gc every 7)" in result.output
    assert ("gradlint probe: note: gc every 7 steps, not 50: at most every 7 steps, so the 30 steps after "
            "warm-up have at least four collections to judge growth on\n") in result.output


def test_a_gc_interval_rounded_to_the_tracking_stride_is_noted():
    pytest.importorskip("torch")
    result = run(f"{STEPS}:clean_step", "--steps", "100", "--gc-every", "10", "--track-every", "4", "--quiet")
    assert result.exit_code == 0, result.output
    assert ("gradlint probe: note: gc every 8 steps, not 10: a multiple of the tracking stride 4, so a tracked "
            "step comes before each collection\n") in result.output


def test_the_default_gc_interval_is_adjusted_without_a_note():
    pytest.importorskip("torch")
    result = run(f"{STEPS}:clean_step", "--steps", "40", "--track-every", "1", "--quiet")
    assert result.exit_code == 0 and "gc every 7)" in result.output
    # Other notes may appear (a thread the test runner started before the probe); not this one.
    assert "note: gc every" not in result.output
