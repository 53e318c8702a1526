"""What `--fix` refuses to write (gradlint/writeback.py's policy), through the real CLI: a file
outside the checked paths reached through a symlink, a read-only file, a file with other hard links.
Each is left byte for byte (same inode, same mode), named on stderr in one line
(`gradlint: not fixed: X: why`), keeps its findings, and the run goes on with the other files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gradlint import writeback

FIXTURES = Path(__file__).parent / "fixtures"
LEAKY = (FIXTURES / "leaky_op.py").read_bytes()


def gradlint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradlint", "check", "--isolated", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def snapshot(path: Path) -> tuple:
    info = os.stat(path)
    return path.read_bytes(), info.st_ino, stat.S_IMODE(info.st_mode), info.st_nlink


def not_fixed_lines(proc: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in proc.stderr, proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("gradlint: not fixed: ")]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/proj (the checked tree, with a fixable ok.py) beside tmp/outside."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "proj" / "ok.py").write_bytes(LEAKY)
    return tmp_path


def assert_ok_fixed(tree: Path) -> None:
    fixed = (tree / "proj" / "ok.py").read_bytes()
    assert fixed != LEAKY and b"ctx.out = out" not in fixed
    assert [p.name for p in (tree / "proj").iterdir() if p.name.endswith(".gradlint")] == []


def test_a_symlink_to_a_file_outside_the_checked_tree_is_not_followed(tree: Path):
    target = tree / "outside" / "target.py"
    target.write_bytes(LEAKY)
    (tree / "proj" / "link.py").symlink_to(os.path.join("..", "outside", "target.py"))
    before = snapshot(target)
    proc = gradlint("--fix", "proj", cwd=tree)
    assert snapshot(target) == before
    assert (tree / "proj" / "link.py").is_symlink()
    assert not_fixed_lines(proc) == [
        f"gradlint: not fixed: proj/link.py: it is a symlink to {target.resolve()}, outside the paths being checked"]
    assert "proj/link.py:8:9: GL101 [*]" in proc.stdout  # its findings stay
    assert proc.returncode == 1, proc.stderr
    assert_ok_fixed(tree)


def test_a_symlink_named_on_the_command_line_is_fixed_through(tree: Path):
    # Naming the link is asking for its file: that is inside the paths being checked.
    target = tree / "outside" / "target.py"
    target.write_bytes(LEAKY)
    (tree / "proj" / "link.py").symlink_to(target)
    proc = gradlint("--fix", "proj/link.py", cwd=tree)
    assert not_fixed_lines(proc) == []
    assert b"ctx.out = out" not in target.read_bytes() and (tree / "proj" / "link.py").is_symlink()


def test_a_symlink_inside_the_checked_tree_is_fixed_through(tree: Path):
    (tree / "proj" / "real").mkdir()
    target = tree / "proj" / "real" / "op.py"
    target.write_bytes(LEAKY)
    (tree / "proj" / "link.py").symlink_to(os.path.join("real", "op.py"))
    proc = gradlint("--fix", "--select", "GL101", "link.py", "ok.py", cwd=tree / "proj")
    assert not_fixed_lines(proc) == [] and proc.returncode == 0, proc.stdout + proc.stderr
    assert b"ctx.out = out" not in target.read_bytes() and (tree / "proj" / "link.py").is_symlink()


def test_a_read_only_file_is_not_replaced(tree: Path):
    read_only = tree / "proj" / "ro.py"
    read_only.write_bytes(LEAKY)
    read_only.chmod(0o444)
    before = snapshot(read_only)
    proc = gradlint("--fix", ".", cwd=tree / "proj")
    assert snapshot(read_only) == before
    assert not_fixed_lines(proc) == ["gradlint: not fixed: ro.py: it is read-only"]
    assert "ro.py:8:9: GL101" in proc.stdout
    assert proc.returncode == 1
    assert_ok_fixed(tree)


def test_a_hard_linked_file_is_not_split(tree: Path):
    linked = tree / "proj" / "hard.py"
    linked.write_bytes(LEAKY)
    os.link(linked, tree / "outside" / "other_name.py")
    before = snapshot(linked)
    proc = gradlint("--fix", ".", cwd=tree / "proj")
    assert snapshot(linked) == before and before[3] == 2
    assert (tree / "outside" / "other_name.py").read_bytes() == LEAKY
    assert not_fixed_lines(proc) == [
        "gradlint: not fixed: hard.py: it has 2 hard links, and replacing it would split them"]
    assert proc.returncode == 1
    assert_ok_fixed(tree)


def test_exit_codes_stay_as_documented(tree: Path):
    read_only = tree / "proj" / "ro.py"
    read_only.write_bytes(LEAKY)
    read_only.chmod(0o444)
    (tree / "proj" / "ok.py").unlink()
    # A refusal is no write error (2): the findings stay, so 1; --exit-zero makes that 0.
    assert gradlint("--fix", "ro.py", cwd=tree / "proj").returncode == 1
    proc = gradlint("--fix", "--exit-zero", "ro.py", cwd=tree / "proj")
    assert proc.returncode == 0 and not_fixed_lines(proc) == ["gradlint: not fixed: ro.py: it is read-only"]
    assert read_only.read_bytes() == LEAKY


def test_diff_leaves_out_what_fix_would_refuse(tree: Path):
    read_only = tree / "proj" / "ro.py"
    read_only.write_bytes(LEAKY)
    read_only.chmod(0o444)
    proc = gradlint("--diff", ".", cwd=tree / "proj")
    assert "+++ ok.py" in proc.stdout and "ro.py" not in proc.stdout
    assert not_fixed_lines(proc) == ["gradlint: not fixed: ro.py: it is read-only"]
    assert proc.returncode == 1


def test_write_fixed_refuses_without_touching_the_file(tmp_path: Path):
    # The library call enforces the policy too, whoever calls it.
    path = tmp_path / "op.py"
    path.write_bytes(LEAKY)
    outside = tmp_path / "outside.py"
    outside.write_bytes(LEAKY)
    link = tmp_path / "sub" / "link.py"
    link.parent.mkdir()
    link.symlink_to(outside)
    with pytest.raises(writeback.Refused, match="outside the paths being checked"):
        writeback.write_fixed(str(link), "x = 1\n", "digest", writeback.resolved_roots([tmp_path / "sub"]))
    path.chmod(0o400)
    with pytest.raises(writeback.Refused, match="read-only"):
        writeback.write_fixed(str(path), "x = 1\n", "digest", writeback.resolved_roots([tmp_path]))
    assert path.read_bytes() == LEAKY and outside.read_bytes() == LEAKY
