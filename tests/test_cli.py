"""The command line as a user meets it: output shapes, exit codes, options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradlint import __version__
from gradlint.cli import main


def run(*args: str, input: bytes | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_leaky_file_reports_file_line_col_code_and_exits_1(leaky_file):
    result = run("check", "leaky_op.py")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("leaky_op.py:8:9: GL101 [*] ctx.out holds its own output")
    assert lines[1].startswith("leaky_op.py:15:9: GL201 backward returns 1 value but forward takes 3 inputs")
    assert lines[-2] == "Found 2 findings (2 errors) in 1 of 1 file checked."
    assert lines[-1] == "[*] 1 fixable with --fix."


def test_clean_file_exits_0_with_one_summary_line(clean_file):
    result = run("check", "clean_op.py")
    assert result.exit_code == 0
    assert result.output == "All checks passed! (1 file checked)\n"


def test_no_files_exits_0_with_a_summary(project):
    result = run("check")
    assert result.exit_code == 0
    assert result.output == "No Python files to check.\n"


def test_json_output_uses_ruffs_field_names(leaky_file):
    result = run("check", "--output-format", "json", "leaky_op.py")
    assert result.exit_code == 1
    records = json.loads(result.output)
    assert {r["code"] for r in records} == {"GL101", "GL201"}
    first = records[0]
    assert set(first) >= {"code", "name", "message", "severity", "filename", "location", "end_location", "url", "fix"}
    assert first["location"] == {"row": 8, "column": 9}
    assert first["end_location"]["row"] == 8 and first["end_location"]["column"] > 9
    assert first["name"] == "ctx-tensor-attribute" and first["severity"] == "error"


def test_github_output_is_one_annotation_per_finding(leaky_file):
    result = run("check", "--output-format", "github", "leaky_op.py")
    lines = result.output.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("::error title=gradlint (GL101),file=leaky_op.py,line=8,col=9,")


def test_select_ignore_and_extend_select(leaky_file):
    assert run("check", "--select", "GL2", "leaky_op.py").output.count("GL201") == 1
    only = run("check", "--select", "GL2", "-q", "leaky_op.py").output
    assert "GL101" not in only
    ignored = run("check", "--ignore", "GL101,GL201", "leaky_op.py")
    assert ignored.exit_code == 0


def test_unknown_selector_is_a_usage_error(leaky_file):
    result = run("check", "--select", "GL999", "leaky_op.py")
    assert result.exit_code == 2
    assert "unknown rule selector 'GL999'" in result.output


@pytest.mark.parametrize(("args", "line"), [
    (["check", "--bogus"],
     "gradlint check: error: no such option '--bogus'. Did you mean '--jobs'? (see `gradlint check --help`)"),
    (["check", "--output-format", "xml"],
     "gradlint check: error: invalid value for '--output-format': 'xml' is not one of 'concise', 'full', "
     "'github', 'json', 'sarif', 'text' (see `gradlint check --help`)"),
    (["check", "--jobs", "0"],
     "gradlint check: error: invalid value for '-j' / '--jobs': 0 is not in the range x>=1 "
     "(see `gradlint check --help`)"),
    (["chek"], "gradlint: error: no such command 'chek'. Did you mean 'check'? (see `gradlint --help`)"),
    (["rule"], "gradlint rule: error: missing argument 'CODE' (see `gradlint rule --help`)"),
    (["probe", "--steps", "0"],
     "gradlint probe: error: invalid value for '--steps': 0 is not in the range x>=1 "
     "(see `gradlint probe --help`)"),
])
def test_click_usage_errors_are_one_line_and_exit_2(args, line):
    result = run(*args)
    assert result.exit_code == 2
    assert result.output == line + "\n"


def test_no_command_still_prints_the_help():
    result = run()
    assert result.exit_code in (0, 2)  # click 8.2 made a bare group exit 2, as ruff does
    assert result.output.startswith("Usage: ") and "\nCommands:\n" in result.output


def test_missing_path_is_a_usage_error(project):
    result = run("check", "nope.py")
    assert result.exit_code == 2
    assert "path does not exist: nope.py" in result.output


def test_exit_zero_and_quiet(leaky_file):
    result = run("check", "--exit-zero", "--quiet", "leaky_op.py")
    assert result.exit_code == 0
    assert "Found" not in result.output and "GL101" in result.output


def test_statistics_counts_per_rule(leaky_file, clean_file):
    result = run("check", "--statistics", ".")
    assert result.exit_code == 1
    assert "1\tGL101\tctx-tensor-attribute" in result.output
    assert "1\tGL201\tbackward-return-count" in result.output


def test_stdin_with_stdin_filename(project, leaky_file):
    source = leaky_file.read_bytes()
    result = run("check", "--stdin-filename", "pkg/op.py", "-", input=source)
    assert result.exit_code == 1
    assert result.output.startswith("pkg/op.py:8:9: GL101")


def test_rule_prints_the_doc_and_rules_lists_all(project):
    doc = run("rule", "gl101")
    assert doc.exit_code == 0
    assert "## Why is this bad?" in doc.output and "ctx.save_for_backward" in doc.output
    listing = run("rules").output.splitlines()
    codes = [line.split()[0] for line in listing]
    assert codes == sorted(codes) and {"GL101", "GL102", "GL103", "GL104", "GL201", "GL301"} <= set(codes)
    assert run("rule", "GL999").exit_code == 2


def test_version():
    assert run("--version").output.strip().endswith(__version__)


def test_jobs_pool_gives_the_same_findings_as_one_process(project):
    source = (Path(__file__).parent / "fixtures" / "leaky_op.py").read_text()
    for i in range(12):
        (project / f"op_{i:02d}.py").write_text(source)
    serial = run("check", "--jobs", "1", ".").output
    pooled = run("check", "--jobs", "2", ".").output
    assert serial == pooled
    assert serial.count("GL101") == 12


def test_module_entry_point_runs_as_a_subprocess(leaky_file):
    completed = subprocess.run([sys.executable, "-m", "gradlint", "check", "leaky_op.py"],
                               capture_output=True, text=True)
    assert completed.returncode == 1
    assert "leaky_op.py:8:9: GL101" in completed.stdout
    assert completed.stderr == ""
