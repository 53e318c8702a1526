"""[tool.gradlint] in pyproject.toml, excludes and .gitignore, per-file ignores, severities."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from gradlint.cli import main

FIXTURES = Path(__file__).parent / "fixtures"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _tree(root: Path, files: dict[str, str], config: str | None = None) -> None:
    for name, fixture in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / fixture, root / name)
    if config is not None:
        (root / "pyproject.toml").write_text(f"[tool.gradlint]\n{config}\n")


def _codes(output: str) -> list[tuple[str, str]]:
    return [(r["filename"], r["code"]) for r in json.loads(output)]


def test_config_select_and_ignore_apply(project):
    _tree(project, {"src/op.py": "leaky_op.py"}, 'ignore = ["GL201"]')
    assert _codes(run("check", "--output-format", "json", "src").output) == [("src/op.py", "GL101")]


def test_nearest_pyproject_is_found_from_a_subdirectory(project, monkeypatch):
    _tree(project, {"src/op.py": "leaky_op.py"}, 'select = ["GL2"]')
    monkeypatch.chdir(project / "src")
    assert _codes(run("check", "--output-format", "json", "op.py").output) == [("op.py", "GL201")]


def test_command_line_select_overrides_config(project):
    _tree(project, {"op.py": "leaky_op.py"}, 'select = ["GL2"]')
    assert _codes(run("check", "--output-format", "json", "--select", "GL101", "op.py").output) == [("op.py", "GL101")]


def test_per_file_ignores(project):
    _tree(project, {"ops/a.py": "leaky_op.py", "tests/test_a.py": "leaky_op.py"},
          '[tool.gradlint.per-file-ignores]\n"tests/*" = ["GL1"]')
    codes = _codes(run("check", "--output-format", "json", ".").output)
    assert ("tests/test_a.py", "GL101") not in codes and ("ops/a.py", "GL101") in codes
    assert ("tests/test_a.py", "GL201") in codes


def test_severity_override(project):
    _tree(project, {"op.py": "leaky_op.py"}, '[tool.gradlint.severity]\nGL101 = "warning"')
    records = json.loads(run("check", "--output-format", "json", "op.py").output)
    assert {r["code"]: r["severity"] for r in records} == {"GL101": "warning", "GL201": "error"}


def test_excludes_hold_for_paths_named_on_the_command_line(project):
    _tree(project, {"vendored/op.py": "leaky_op.py", "op.py": "clean_op.py"}, 'extend-exclude = ["vendored"]')
    assert run("check", "vendored/op.py").exit_code == 0
    assert run("check", ".").output == "All checks passed! (1 file checked)\n"


def test_default_excludes_skip_virtualenvs_and_build_dirs(project):
    _tree(project, {".venv/lib/op.py": "leaky_op.py", "build/lib/op.py": "leaky_op.py", "op.py": "clean_op.py"})
    assert run("check", ".").output == "All checks passed! (1 file checked)\n"


def test_gitignore_is_respected(project):
    _tree(project, {"gen/op.py": "leaky_op.py", "keep/op.py": "clean_op.py", "keep/gen_op.py": "leaky_op.py"})
    (project / ".gitignore").write_text("# generated\ngen/\n*_op.py\n!keep/gen_op.py\n")
    codes = _codes(run("check", "--output-format", "json", ".").output)
    assert {path for path, _ in codes} == {"keep/gen_op.py"}


def test_bad_config_is_one_line_and_exit_2(project):
    (project / "pyproject.toml").write_text("[tool.gradlint]\nselect = 'GL101'\n")
    _tree(project, {"op.py": "clean_op.py"})
    result = run("check", "op.py")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"gradlint: error: {project / 'pyproject.toml'}: [tool.gradlint]: select must be a list of strings, got string 'GL101'"]


def test_unknown_config_key_is_reported(project):
    (project / "pyproject.toml").write_text("[tool.gradlint]\nselekt = ['GL101']\n")
    result = run("check", ".")
    assert result.exit_code == 2 and "unknown key(s) in [tool.gradlint]: selekt" in result.output


def test_broken_toml_is_reported(project):
    (project / "pyproject.toml").write_text("[tool.gradlint\n")
    result = run("check", ".")
    assert result.exit_code == 2 and "cannot read" in result.output


def test_isolated_ignores_config(project):
    _tree(project, {"op.py": "leaky_op.py"}, 'ignore = ["ALL"]')
    assert run("check", "op.py").exit_code == 0
    assert run("check", "--isolated", "op.py").exit_code == 1


def test_a_directory_outside_the_project_named_explicitly_is_checked(project, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "lib" / "site-packages" / "pkg"
    outside.mkdir(parents=True)
    shutil.copy(FIXTURES / "leaky_op.py", outside / "op.py")
    (outside / "build").mkdir()
    shutil.copy(FIXTURES / "leaky_op.py", outside / "build" / "op.py")
    records = json.loads(run("check", "--output-format", "json", str(outside)).output)
    # the default excludes apply below the named directory, not to the path leading to it
    assert {Path(r["filename"]).relative_to(outside).as_posix() for r in records} == {"op.py"}
