"""`gradlint probe` through click's runner: exit codes, one-line usage errors, outputs."""

from __future__ import annotations

import json
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
    ("train.py", "gradlint probe: error: target 'train.py' must be FILE.py:FUNCTION or package.module:FUNCTION\n"),
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
    assert "--track-every" in result.output and "Traceback" not in result.output


def test_a_stride_is_shown_in_the_report_header():
    pytest.importorskip("torch")
    result = run(f"{STEPS}:keep_losses", "--steps", "100", "--track-every", "4", "--quiet")
    assert result.exit_code == 1, result.output
    assert "tracking 1 step in 4)" in result.output and "verdict: retained  4 B/step" in result.output


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
                             "pip install 'gradlint[plot]' (or pip install matplotlib)\n")


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
    assert result.output == "gradlint probe: error: the probe needs PyTorch: pip install 'gradlint[torch]' (or pip install torch)\n"


def test_importing_the_probe_command_does_not_import_torch():
    code = "import sys, gradlint.runtime_probe.cli, gradlint.runtime_probe; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
