"""Every bad [tool.gradlint] value is one `gradlint: error:` line naming the file, the key and what
is expected, exit 2, nothing on stdout, never a traceback; and a cache-dir from pyproject.toml stays
inside the project or the user's cache folder (issue 16)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gradlint.config import MAX_FILE_SIZE_LIMIT, ConfigError, load_settings

FIXTURES = Path(__file__).parent / "fixtures"
README = Path(__file__).resolve().parent.parent / "README.md"
GL = "[tool.gradlint]\n"

# id: (pyproject.toml, what the one line must say). Where it names a key, "{key}" is checked too.
BAD: dict[str, tuple[str, str]] = {
    # the tables themselves
    "tool-int": ("tool = 3\n", "`tool` must be a table, got integer 3"),
    "tool-string": ('tool = "gradlint"\n', "`tool` must be a table, got string 'gradlint'"),
    "tool-array": ('tool = ["gradlint"]\n', "`tool` must be a table, got array"),
    "gradlint-string": ('[tool]\ngradlint = "x"\n', "[tool.gradlint] must be a table, got string 'x'"),
    "gradlint-int": ("[tool]\ngradlint = 3\n", "[tool.gradlint] must be a table, got integer 3"),
    "gradlint-array": ('[tool]\ngradlint = ["select"]\n', "[tool.gradlint] must be a table, got array"),
    "nested-too-deeply": (GL + "select = " + "[" * 3000 + "]" * 3000 + "\n", "cannot read: nested too deeply"),
    "int-of-5000-digits": (GL + "max-file-size = 1" + "0" * 5000 + "\n", "cannot read: Exceeds the limit"),
    "unknown-key-with-newline": (GL + '"sel\\nect" = 3\n', 'unknown key(s) in [tool.gradlint]: "sel\\nect"'),
    # max-file-size
    **{f"max-file-size={value}": (GL + f"max-file-size = {value}\n",
                                  f"max-file-size must be a whole number of bytes from 1 to {MAX_FILE_SIZE_LIMIT}")
       for value in ["inf", "-inf", "nan", "9223372036854775807", "18446744073709551616", "1099511627776",
                     str(MAX_FILE_SIZE_LIMIT + 1), "-1", "0", "1.5", "1e6", "true", '"1MB"', "[1048576]",
                     "{ bytes = 1 }", "1979-05-27"]},
    # cache-dir (the location policy is further down)
    "cache-dir-nul": (GL + 'cache-dir = "a\\u0000b"\n', "cache-dir must be a folder name, got string 'a\\x00b' with a NUL"),
    "cache-dir-int": (GL + "cache-dir = 3\n", "cache-dir must be a string (a folder inside the project), got integer 3"),
    "cache-dir-bool": (GL + "cache-dir = false\n", "cache-dir must be a string (a folder inside the project), got boolean false"),
    "cache-dir-array": (GL + 'cache-dir = [".c"]\n', "cache-dir must be a string (a folder inside the project), got array"),
    # the selector lists
    "select-int": (GL + "select = 3\n", "select must be a list of strings, got integer 3"),
    "select-string": (GL + 'select = "GL101"\n', "select must be a list of strings, got string 'GL101'"),
    "select-table": (GL + "select = { GL101 = 1 }\n", "select must be a list of strings, got table"),
    "select-non-string": (GL + 'select = ["GL101", 3]\n', "select must be a list of strings, got integer 3 at select[1]"),
    "select-nested-list": (GL + 'select = [["GL101"]]\n', "select must be a list of strings, got array at select[0]"),
    "select-blank": (GL + 'select = [" "]\n', "select[0] must be a rule code or prefix (see `gradlint rules`), got string ' '"),
    "extend-select-bool": (GL + "extend-select = true\n", "extend-select must be a list of strings, got boolean true"),
    "ignore-empty-selector": (GL + 'ignore = [""]\n', "ignore[0] must be a rule code or prefix (see `gradlint rules`), got string ''"),
    "ignore-float": (GL + "ignore = [1.5]\n", "ignore must be a list of strings, got float 1.5 at ignore[0]"),
    # the pattern lists
    "exclude-string": (GL + 'exclude = "build"\n', "exclude must be a list of strings, got string 'build'"),
    "exclude-int-item": (GL + "exclude = [1]\n", "exclude must be a list of strings, got integer 1 at exclude[0]"),
    "extend-exclude-empty": (GL + 'extend-exclude = [""]\n', "extend-exclude[0] must be a pattern, got string ''"),
    # per-file-ignores
    "per-file-ignores-int": (GL + "per-file-ignores = 3\n", "per-file-ignores must be a table, got integer 3"),
    "per-file-ignores-array": (GL + 'per-file-ignores = ["a"]\n', "per-file-ignores must be a table, got array"),
    "per-file-ignores-string-value": (GL + '[tool.gradlint.per-file-ignores]\n"tests/*" = "GL101"\n',
                                      "per-file-ignores.\"tests/*\" must be a list of strings, got string 'GL101'"),
    "per-file-ignores-int-item": (GL + '[tool.gradlint.per-file-ignores]\nx = [1]\n',
                                  "per-file-ignores.x must be a list of strings, got integer 1 at per-file-ignores.x[0]"),
    "per-file-ignores-empty-pattern": (GL + '[tool.gradlint.per-file-ignores]\n"" = ["GL101"]\n',
                                       "a per-file-ignores key must be a file pattern, got string ''"),
    "per-file-ignores-empty-selector": (GL + '[tool.gradlint.per-file-ignores]\nx = [""]\n',
                                        "per-file-ignores.x[0] must be a rule code or prefix"),
    # severity
    "severity-int": (GL + "severity = 3\n", "severity must be a table, got integer 3"),
    "severity-array": (GL + 'severity = ["warning"]\n', "severity must be a table, got array"),
    "severity-int-value": (GL + "[tool.gradlint.severity]\nGL101 = 3\n",
                           'severity.GL101 must be one of "error", "warning", "note", got integer 3'),
    "severity-unknown-value": (GL + '[tool.gradlint.severity]\nGL101 = "fatal"\n',
                               'severity.GL101 must be one of "error", "warning", "note", got string \'fatal\''),
    "severity-list-value": (GL + '[tool.gradlint.severity]\nGL101 = ["warning"]\n',
                            'severity.GL101 must be one of "error", "warning", "note", got array'),
    "severity-empty-key": (GL + '[tool.gradlint.severity]\n"" = "warning"\n', "a severity key must be a rule code or prefix"),
    "severity-key-with-newline": (GL + '[tool.gradlint.severity]\n"GL1\\n01" = 3\n', 'severity."GL1\\n01" must be one of'),
    # respect-gitignore
    **{f"respect-gitignore={value}": (GL + f"respect-gitignore = {value}\n",
                                      "respect-gitignore must be true or false, got ")
       for value in ['"no"', "0", "1", "[true]"]},
    # cache-dir outside the project
    "cache-dir-empty": (GL + 'cache-dir = ""\n', "cache-dir '' is the project folder itself"),
    "cache-dir-dot": (GL + 'cache-dir = "."\n', "cache-dir '.' is the project folder itself"),
    "cache-dir-dot-slash": (GL + 'cache-dir = "./"\n', "cache-dir './' is the project folder itself"),
    "cache-dir-back-to-root": (GL + 'cache-dir = "src/.."\n', "cache-dir 'src/..' is the project folder itself"),
    "cache-dir-parent": (GL + 'cache-dir = ".."\n', "cache-dir '..' is not inside the project"),
    "cache-dir-sibling": (GL + 'cache-dir = "../elsewhere"\n', "cache-dir '../elsewhere' is not inside the project"),
    "cache-dir-absolute": (GL + 'cache-dir = "/tmp/gradlint-elsewhere"\n', "cache-dir '/tmp/gradlint-elsewhere' is not inside the project"),
    "cache-dir-home": (GL + 'cache-dir = "~/.ssh"\n', None),  # no ~ expansion: a folder named "~" inside the project
    "cache-dir-symlink-out": (GL + 'cache-dir = "link/cache"\n', "cache-dir 'link/cache' (resolves to "),
}
BAD.pop("cache-dir-home")  # allowed: documented by test_a_tilde_is_not_expanded below


def _project(root: Path, name: str, pyproject: str) -> Path:
    project = root / re.sub(r"[^A-Za-z0-9_.=-]", "_", name).lstrip(".")
    project.mkdir()
    (project / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    shutil.copy(FIXTURES / "leaky_op.py", project / "leaky_op.py")
    return project


def _check(project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradlint", "check", *args, "."], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def user_env(tmp_path_factory) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GRADLINT_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("user-cache"))
    return env


# Through the real CLI, a fresh interpreter each (~0.5 s): the cases the issue names and one of each
# kind of check. Every case runs in-process below as well.
THROUGH_THE_CLI = [
    "tool-int", "gradlint-string", "nested-too-deeply", "int-of-5000-digits", "unknown-key-with-newline",
    "max-file-size=inf", "max-file-size=9223372036854775807", "max-file-size=-1", "max-file-size=0",
    "max-file-size=1.5", "max-file-size=true", "cache-dir-nul", "cache-dir-int", "select-int",
    "select-non-string", "ignore-empty-selector", "per-file-ignores-array", "severity-unknown-value",
    'respect-gitignore="no"', "cache-dir-empty", "cache-dir-dot", "cache-dir-sibling", "cache-dir-symlink-out",
]


def _make(root: Path, outside: Path, name: str) -> Path:
    project = _project(root, name, BAD[name][0])
    if name == "cache-dir-symlink-out":
        (project / "link").symlink_to(outside)
    return project


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, user_env) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """The THROUGH_THE_CLI cases, a few interpreters at a time."""
    root, outside = tmp_path_factory.mktemp("bad-configs"), tmp_path_factory.mktemp("outside")
    projects = {name: _make(root, outside, name) for name in THROUGH_THE_CLI}
    with ThreadPoolExecutor(4) as pool:
        procs = dict(zip(projects, pool.map(lambda p: _check(p, user_env), projects.values())))
    return {name: (projects[name], procs[name]) for name in projects}


def _assert_one_error_line(project: Path, case: str, code: int, stdout: str, stderr: str) -> None:
    assert "Traceback" not in stderr
    assert (code, stdout) == (2, ""), stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"gradlint: error: {project / 'pyproject.toml'}: ")
    assert BAD[case][1] in lines[0]
    assert not (project / ".gradlint_cache").exists()  # nothing was written
    assert {p.name for p in project.iterdir()} - {"link"} == {"leaky_op.py", "pyproject.toml"}


@pytest.mark.parametrize("case", THROUGH_THE_CLI)
def test_a_bad_value_is_one_error_line_and_exit_2_through_the_cli(outcomes, case):
    project, proc = outcomes[case]
    _assert_one_error_line(project, case, proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_value_is_one_error_line_and_exit_2(tmp_path, monkeypatch, case):
    from click.testing import CliRunner

    from gradlint.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.delenv("GRADLINT_CACHE_DIR", raising=False)
    (tmp_path / "outside").mkdir()
    project = _make(tmp_path, tmp_path / "outside", case)
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["check", "."], catch_exceptions=False)
    _assert_one_error_line(project, case, result.exit_code, result.stdout, result.stderr)


# ----- what stays allowed -------------------------------------------------------------------


def test_the_readme_configuration_sample_loads(tmp_path):
    section = README.read_text().split("## Configuration", 1)[1]
    sample = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    (tmp_path / "pyproject.toml").write_text(sample)
    settings = load_settings(tmp_path / "pyproject.toml")
    assert settings.cache_dir == tmp_path.resolve() / ".gradlint_cache"
    assert settings.resolved_cache_dir() == settings.cache_dir


@pytest.mark.parametrize("value", [1, 1048576, MAX_FILE_SIZE_LIMIT])
def test_max_file_size_in_range_is_taken(tmp_path, value):
    (tmp_path / "pyproject.toml").write_text(f"{GL}max-file-size = {value}\n")
    assert load_settings(tmp_path / "pyproject.toml").max_file_size == value


@pytest.mark.parametrize("value", ["build/lint-cache", ".gradlint_cache", "./.cache/gradlint", "src/../cache"])
def test_a_cache_dir_inside_the_project_is_taken(tmp_path, value):
    (tmp_path / "pyproject.toml").write_text(f'{GL}cache-dir = "{value}"\n')
    settings = load_settings(tmp_path / "pyproject.toml")
    assert settings.resolved_cache_dir() == tmp_path.resolve() / value


def test_an_absolute_cache_dir_inside_the_project_or_the_user_cache_folder_is_taken(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADLINT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    project = tmp_path / "project"
    project.mkdir()
    for value in (project / "cache", tmp_path / "xdg" / "gradlint", tmp_path / "xdg" / "gradlint" / "proj"):
        (project / "pyproject.toml").write_text(f'{GL}cache-dir = "{value}"\n')
        assert load_settings(project / "pyproject.toml").resolved_cache_dir() == value
    # ... but not the rest of the user's cache folder, nor the folder above the project
    for value in (tmp_path / "xdg", tmp_path / "xdg" / "pip", tmp_path):
        (project / "pyproject.toml").write_text(f'{GL}cache-dir = "{value}"\n')
        with pytest.raises(ConfigError, match="cache-dir .* is not inside the project"):
            load_settings(project / "pyproject.toml")


def test_a_tilde_is_not_expanded(tmp_path):
    (tmp_path / "pyproject.toml").write_text(f'{GL}cache-dir = "~/.ssh"\n')
    assert load_settings(tmp_path / "pyproject.toml").resolved_cache_dir() == tmp_path.resolve() / "~" / ".ssh"


def test_the_environment_may_put_the_cache_anywhere_and_wins_over_pyproject(tmp_path, monkeypatch, user_env):
    project = _project(tmp_path, "p", f'{GL}cache-dir = "build/lint-cache"\n')
    elsewhere = tmp_path / "elsewhere"
    proc = _check(project, {**user_env, "GRADLINT_CACHE_DIR": str(elsewhere)})
    assert proc.returncode == 1 and proc.stderr == ""
    assert (elsewhere / "CACHEDIR.TAG").is_file() and not (project / "build").exists()
    # an existing folder named in the environment is used, and left unmarked
    proc = _check(project, {**user_env, "GRADLINT_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 1 and proc.stderr == ""
    assert not (tmp_path / ".gitignore").exists() and not (tmp_path / "CACHEDIR.TAG").exists()


def test_a_checked_in_cache_folder_symlink_pointing_outside_is_refused(tmp_path, user_env):
    project = _project(tmp_path, "p", f'{GL}select = ["ALL"]\n')
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / ".gradlint_cache").symlink_to(outside)
    proc = _check(project, user_env)
    assert (proc.returncode, proc.stdout) == (2, "") and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith(f"gradlint: error: the cache folder '{project / '.gradlint_cache'}' (resolves to ")
    assert "GRADLINT_CACHE_DIR" in proc.stderr and "Traceback" not in proc.stderr
    assert list(outside.iterdir()) == []
    assert _check(project, user_env, "--no-cache").returncode == 1  # without the cache the run goes on


def test_a_cache_folder_symlink_inside_the_project_is_fine(tmp_path, user_env):
    project = _project(tmp_path, "p", f'{GL}select = ["ALL"]\n')
    (project / "build").mkdir()
    (project / ".gradlint_cache").symlink_to(project / "build")
    proc = _check(project, user_env)
    assert proc.returncode == 1 and proc.stderr == ""
    assert [p.name for p in (project / "build").iterdir()] != []
