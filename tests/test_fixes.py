"""`--fix`, `--unsafe-fixes`, `--diff`: what gets written, how, and that nothing else changes."""

from __future__ import annotations

import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gradlint import check as check_module
from gradlint.check import CheckRequest, run_check
from gradlint.engine import RuleSet, lint_source
from gradlint.registry import all_rules

LEAKY = textwrap.dedent("""\
    import torch


    class Exp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = x.exp()
            ctx.out = out
            return out

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.out


    class Scale(torch.autograd.Function):
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2


    losses = []
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        losses.append(loss)
""")

SAFELY_FIXED = LEAKY.replace("        ctx.out = out\n", "        ctx.save_for_backward(out)\n").replace(
    "        return grad * ctx.out\n", "        out, = ctx.saved_tensors\n        return grad * out\n").replace(
    "class Scale(torch.autograd.Function):\n    def forward",
    "class Scale(torch.autograd.Function):\n    @staticmethod\n    def forward")
ALL_FIXED = SAFELY_FIXED.replace("losses.append(loss)", "losses.append(loss.item())")


def gradlint(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradlint", "check", "--isolated", *args], cwd=cwd,
                          input=stdin, capture_output=True, timeout=120)


@pytest.fixture
def leaky(project: Path) -> Path:
    path = project / "op.py"
    path.write_text(LEAKY, encoding="utf-8")
    return path


def codes(source: str) -> list[str]:
    return [f.code for f in lint_source(source, "op.py", RuleSet(all_rules(), {})).findings]


def test_fix_applies_safe_fixes_only_and_reports_what_is_left(leaky: Path, project: Path):
    proc = gradlint("--fix", "op.py", cwd=project)
    assert leaky.read_text(encoding="utf-8") == SAFELY_FIXED
    assert proc.returncode == 1, proc.stderr  # the unsafe GL103 fix was not applied: a finding is left
    out = proc.stdout.decode()
    assert "Fixed 2 findings in 1 file." in out
    assert "op.py:31:5: GL103 a graph-attached" in out  # two lines further down after the fixes
    assert "No fixes available (1 hidden fix can be enabled with --unsafe-fixes)." in out
    assert codes(SAFELY_FIXED) == ["GL103"]


def test_unsafe_fixes_fix_everything_and_exit_0(leaky: Path, project: Path):
    proc = gradlint("--fix", "--unsafe-fixes", "op.py", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert leaky.read_text(encoding="utf-8") == ALL_FIXED
    assert codes(ALL_FIXED) == []
    # Idempotent: a second run finds nothing to do and leaves the bytes alone.
    before = leaky.read_bytes()
    again = gradlint("--fix", "--unsafe-fixes", "op.py", cwd=project)
    assert again.returncode == 0 and leaky.read_bytes() == before
    assert b"Fixed" not in again.stdout


def test_without_fix_the_findings_are_marked_and_counted(leaky: Path, project: Path):
    proc = gradlint("op.py", cwd=project)
    lines = proc.stdout.decode().splitlines()
    assert "op.py:8:9: GL101 [*] ctx.out holds its own output" in "\n".join(lines)
    assert any(line.startswith("op.py:29:5: GL103 a graph") for line in lines)  # unsafe: no mark
    assert lines[-1] == "[*] 2 fixable with --fix (1 more with --unsafe-fixes)."
    assert leaky.read_text(encoding="utf-8") == LEAKY


def test_diff_prints_the_change_writes_nothing_and_exits_1(leaky: Path, project: Path):
    proc = gradlint("--diff", "op.py", cwd=project)
    assert proc.returncode == 1
    assert leaky.read_text(encoding="utf-8") == LEAKY
    out = proc.stdout.decode()
    assert out.startswith("--- op.py\n+++ op.py\n")
    assert "-        ctx.out = out\n+        ctx.save_for_backward(out)\n" in out
    assert SAFELY_FIXED != LEAKY
    assert "losses.append(loss.item())" not in out
    assert "Would fix 2 findings in 1 file." in proc.stderr.decode()
    # The diff applies with patch(1) and gives exactly what --fix writes.
    if subprocess.run(["which", "patch"], capture_output=True).returncode == 0:
        subprocess.run(["patch", "-s", "-p0"], input=proc.stdout, cwd=project, check=True)
        assert leaky.read_text(encoding="utf-8") == SAFELY_FIXED
        clean = gradlint("--diff", "op.py", cwd=project)
        assert clean.returncode == 0 and clean.stdout == b""


def test_newlines_bom_permissions_and_symlinks_are_kept(project: Path):
    real = project / "real_op.py"
    real.write_bytes(b"\xef\xbb\xbf" + LEAKY.replace("\n", "\r\n").encode("utf-8"))
    real.chmod(0o751)
    link = project / "op.py"
    link.symlink_to(real.name)
    proc = gradlint("--fix", "--unsafe-fixes", "op.py", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert link.is_symlink()
    data = real.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    assert data[3:].decode("utf-8") == ALL_FIXED.replace("\n", "\r\n")
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert stat.S_IMODE(real.stat().st_mode) == 0o751
    assert [p.name for p in project.iterdir() if p.name.endswith(".gradlint")] == []


def test_a_failed_write_leaves_the_file_whole(leaky: Path, project: Path, monkeypatch: pytest.MonkeyPatch):
    def refuse(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("gradlint.writeback.os.replace", refuse)
    outcome = run_check(CheckRequest(paths=[leaky], isolated=True, fix=True, jobs=1))
    assert leaky.read_text(encoding="utf-8") == LEAKY
    assert outcome.not_written == [(str(leaky), "cannot write it: No space left on device")]
    assert outcome.changes == []
    # Nothing was fixed there, so the findings reported are the file's own.
    assert [f.code for f in outcome.findings] == codes(LEAKY)
    assert [p.name for p in project.iterdir()] == ["op.py"]


def test_a_file_changed_during_the_run_is_not_overwritten(leaky: Path, monkeypatch: pytest.MonkeyPatch):
    real = check_module._take_change

    def edit_first(result, request, outcome):
        leaky.write_text(LEAKY + "# edited meanwhile\n", encoding="utf-8")
        return real(result, request, outcome)

    monkeypatch.setattr(check_module, "_take_change", edit_first)
    outcome = run_check(CheckRequest(paths=[leaky], isolated=True, fix=True, jobs=1))
    assert leaky.read_text(encoding="utf-8") == LEAKY + "# edited meanwhile\n"
    assert outcome.not_written and "changed while gradlint was checking it" in outcome.not_written[0][1]


def test_cli_exits_2_with_one_line_when_a_fix_cannot_be_written(leaky: Path, monkeypatch: pytest.MonkeyPatch):
    from click.testing import CliRunner

    from gradlint.cli import main

    def refuse(prefix, suffix, dir):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("gradlint.writeback.tempfile.mkstemp", refuse)
    result = CliRunner().invoke(main, ["check", "--isolated", "--fix", "op.py"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "gradlint: error: the fixes to op.py were not written: cannot create a temporary file beside it: "
        "Permission denied"]
    assert leaky.read_text(encoding="utf-8") == LEAKY


def test_stdin_fix_prints_the_fixed_source_and_the_findings_on_stderr(project: Path):
    proc = gradlint("--fix", "--stdin-filename", "op.py", "-", cwd=project, stdin=LEAKY.encode())
    assert proc.stdout.decode() == SAFELY_FIXED
    assert "GL103" in proc.stderr.decode()
    assert proc.returncode == 1
    untouched = b"\xff\xfe not utf-8\n"
    proc = gradlint("--fix", "-", cwd=project, stdin=untouched)
    assert proc.stdout == untouched


def test_json_output_carries_the_edits(leaky: Path, project: Path):
    import json

    records = json.loads(gradlint("--output-format", "json", "op.py", cwd=project).stdout)
    gl101 = next(r for r in records if r["code"] == "GL101")
    assert gl101["fix"]["applicability"] == "safe"
    edits = {(e["location"]["row"], e["content"]) for e in gl101["fix"]["edits"]}
    assert (8, "ctx.save_for_backward(out)") in edits
    assert (13, "        out, = ctx.saved_tensors\n") in edits
    gl103 = next(r for r in records if r["code"] == "GL103")
    assert gl103["fix"]["applicability"] == "unsafe"


def test_fixed_function_computes_the_same_gradients_without_the_cycle(leaky: Path, project: Path):
    torch = pytest.importorskip("torch")
    import gc
    import weakref

    gradlint("--fix", "op.py", cwd=project)
    fixed = leaky.read_text(encoding="utf-8")
    namespace: dict = {}
    exec(compile(fixed.split("losses = []")[0], "op.py", "exec"), namespace)
    exp = namespace["Exp"]
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(exp.apply, (x,))
    # Before the fix the output sat in a ctx -> output cycle until gc.collect(); now it goes with `del`.
    gc.disable()
    try:
        out = exp.apply(x)
        storage = weakref.ref(out.untyped_storage())
        del out
        assert storage() is None
    finally:
        gc.enable()
