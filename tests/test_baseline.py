"""`gradlint check --baseline FILE`: written once, then only findings it does not hold are reported,
matched by code, file and the code around them, not by line number."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradlint.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(*args: str, input: bytes | None = None):
    return CliRunner().invoke(main, ["check", "--no-cache", *args], input=input, catch_exceptions=False)


@pytest.fixture
def legacy(project: Path) -> Path:
    """A project with the leaky kNN op and training loop: 8 findings today."""
    shutil.copy(EXAMPLES / "knn_scatter_leaky.py", project / "knn.py")
    shutil.copy(EXAMPLES / "train_leaky.py", project / "train.py")
    return project


def test_first_run_writes_the_baseline_reports_nothing_and_exits_0(legacy):
    result = run("--baseline", "gradlint-baseline.json", ".")
    assert result.exit_code == 0
    assert "gradlint: wrote baseline gradlint-baseline.json with 8 findings; later runs with --baseline " \
           "report only new findings" in result.output
    document = json.loads((legacy / "gradlint-baseline.json").read_text())
    assert document["gradlint-baseline"] == 1
    assert {(f["code"], f["path"]) for f in document["findings"]} >= {("GL101", "knn.py"), ("GL104", "train.py")}
    assert all(len(f["fingerprint"]) == len(f["context"]) == 16 for f in document["findings"])
    assert oct(os.stat(legacy / "gradlint-baseline.json").st_mode & 0o777) != oct(0o600)


def test_second_run_reports_nothing_and_says_what_the_baseline_hides(legacy):
    run("--baseline", "b.json", ".")
    result = run("--baseline", "b.json", ".")
    assert result.exit_code == 0
    assert result.output == "All checks passed! (2 files checked)\n8 findings in the baseline not shown.\n"


def test_lines_added_above_do_not_resurrect_a_finding_but_a_new_one_is_reported(legacy):
    run("--baseline", "b.json", ".")
    knn = legacy / "knn.py"
    source = knn.read_text()
    # Twelve lines more at the top, and one new leak further down.
    source = "# a new header\n" * 12 + source
    source = source.replace("        ctx.k = k\n", "        ctx.k = k\n        ctx.feat = feat\n")
    knn.write_text(source)
    result = run("--baseline", "b.json", ".")
    assert result.exit_code == 1
    findings = [line for line in result.output.splitlines() if line.startswith("knn.py")]
    assert len(findings) == 1 and findings[0].startswith("knn.py:33:9: GL101 ") and "ctx.feat" in findings[0]
    assert "8 findings in the baseline not shown." in result.output


def test_a_fixed_finding_drops_out_and_a_copy_of_a_baselined_line_is_new(legacy):
    run("--baseline", "b.json", ".")
    train = legacy / "train.py"
    source = train.read_text()
    train.write_text(source.replace("            losses.append(loss)  # GL103: the list keeps every step's graph\n",
                                    "            losses.append(loss.item())\n"))
    result = run("--baseline", "b.json", ".")
    assert result.exit_code == 0
    assert "7 findings in the baseline not shown; 1 of its entries match nothing now." in result.output
    # The same leaky op twice in a second file: the baseline held one file's findings, not these.
    shutil.copy(legacy / "knn.py", legacy / "knn_copy.py")
    again = run("--baseline", "b.json", ".")
    assert again.exit_code == 1
    assert {line.split(":")[0] for line in again.output.splitlines() if ": GL" in line} == {"knn_copy.py"}


def test_two_identical_findings_are_two_entries_and_a_third_is_new(project):
    op = (FIXTURES / "leaky_op.py").read_text()
    twice = op + "\n\n" + op.replace("ScatterMean", "ScatterMean2")
    (project / "op.py").write_text(twice)
    run("--baseline", "b.json", "op.py")
    entries = json.loads((project / "b.json").read_text())["findings"]
    gl101 = [e for e in entries if e["code"] == "GL101"]
    assert len(gl101) == 2 and gl101[0]["fingerprint"] == gl101[1]["fingerprint"]
    (project / "op.py").write_text(twice + "\n\n" + op.replace("ScatterMean", "ScatterMean3"))
    result = run("--baseline", "b.json", "op.py")
    assert result.exit_code == 1
    assert sorted(line.split(": ")[1].split()[0] for line in result.output.splitlines() if ": GL" in line) == ["GL101", "GL201"]


def test_paths_are_relative_to_the_baseline_so_it_works_from_another_directory(legacy):
    (legacy / "ci").mkdir()
    run("--baseline", "ci/baseline.json", ".")
    assert {f["path"] for f in json.loads((legacy / "ci" / "baseline.json").read_text())["findings"]} \
        == {"../knn.py", "../train.py"}
    os.chdir(legacy / "ci")
    result = run("--baseline", "baseline.json", "..")
    assert result.exit_code == 0, result.output


def test_stdin_is_matched_by_its_stdin_filename(project):
    source = (FIXTURES / "leaky_op.py").read_bytes()
    assert run("--baseline", "b.json", "--stdin-filename", "op.py", "-", input=source).exit_code == 0
    assert run("--baseline", "b.json", "--stdin-filename", "op.py", "-", input=source).exit_code == 0
    assert run("--baseline", "b.json", "--stdin-filename", "other.py", "-", input=source).exit_code == 1


@pytest.mark.parametrize(("content", "message"), [
    (b"", "gradlint: error: baseline b.json is not JSON: Expecting value (line 1, column 1); delete it to write a new one"),
    (b"[1, 2]", 'gradlint: error: baseline b.json is not a gradlint baseline (no "gradlint-baseline" key)'),
    (b'{"gradlint-baseline": 2, "findings": []}',
     "gradlint: error: baseline b.json has format version 2; this gradlint reads version 1"),
    (b'{"gradlint-baseline": 1, "findings": {}}', 'gradlint: error: baseline b.json: "findings" must be a list'),
    (b'{"gradlint-baseline": 1, "findings": [{"code": "GL101", "path": "a.py", "fingerprint": "ab"}]}',
     'gradlint: error: baseline b.json: findings[0] needs "context" as a non-empty string'),
    (b"\xff\xfe", "gradlint: error: baseline b.json is not UTF-8 (byte 0)"),
])
def test_a_broken_baseline_is_one_line_and_exit_2(leaky_file, content, message):
    (leaky_file.parent / "b.json").write_bytes(content)
    result = run("--baseline", "b.json", "leaky_op.py")
    assert result.exit_code == 2
    assert result.output == message + "\n"
    assert (leaky_file.parent / "b.json").read_bytes() == content  # never overwritten


def test_a_baseline_in_a_missing_directory_is_one_line_and_exit_2(leaky_file):
    result = run("--baseline", "nowhere/b.json", "leaky_op.py")
    assert result.exit_code == 2
    assert result.output == "gradlint: error: cannot write baseline nowhere/b.json: No such file or directory\n"


def test_baseline_with_diff_is_a_usage_error(leaky_file):
    result = run("--baseline", "b.json", "--diff", "leaky_op.py")
    assert result.exit_code == 2
    assert result.output == ("gradlint check: error: --baseline cannot be combined with --diff "
                             "(see `gradlint check --help`)\n")
