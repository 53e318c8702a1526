"""The `.pre-commit-hooks.yaml` hook, run by the real `pre-commit` package against temporary git repos.

The checkout is copied into a temporary git repo and committed there, so the hook under test is the
working tree as it is now (uncommitted work included), and pre-commit clones and pip-installs it the
way it would from GitHub. libcst and click come from the configured package index (a local mirror here).

`pre-commit try-repo` installs the hook into a throwaway store on every call, so it is used for the
two basic cases (a GL101 file fails, a clean file passes); the remaining cases go through a
`.pre-commit-config.yaml` and `pre-commit install` with one PRE_COMMIT_HOME, so the hook's environment
is built once, and they include a real `git commit` that the hook blocks.
The README's snippet is run as written (only its repository address points at the local copy),
at a local `vX.Y.Z` tag of the version in pyproject.toml: the rev scheme the README names.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
RELEASE_TAG = f"v{VERSION}"  # the README's rev scheme: releases are tagged vX.Y.Z

BAD = (Path(__file__).parent / "fixtures" / "square_leaky.py").read_text()

CLEAN = (Path(__file__).parent / "fixtures" / "square_clean.py").read_text()

_COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "venv", ".tox", ".nox", "build", "dist", "*.egg-info", "__pycache__",
    ".pytest_cache", ".ruff_cache", ".mypy_cache", ".gradlint_cache", "*.so", "*.pyc",
)


def copy_checkout(dest: Path) -> Path:
    """Copy the working tree (tracked and untracked, minus what .gitignore ignores) to dest."""
    files: list[str] | None = None
    if (REPO / ".git").exists():
        proc = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True, check=False,
        )
        if proc.returncode == 0:
            files = [f for f in proc.stdout.decode().split("\0") if f]
    if files is None:
        shutil.copytree(REPO, dest, ignore=_COPY_IGNORE, symlinks=True)
        return dest
    dest.mkdir(parents=True)
    for rel in files:
        src = REPO / rel
        if not src.is_file():  # deleted in the working tree but still in the index
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    return dest


def base_env(pre_commit_home: Path) -> dict[str, str]:
    # No GIT_* from an enclosing hook or CI step, no outer venv, no colour.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_", "PRE_COMMIT")) and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "SKIP")}
    env.update(
        PRE_COMMIT_HOME=str(pre_commit_home),
        PRE_COMMIT_COLOR="never",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        # Keep git away from the user's global/system config (hooks paths, signing, templates).
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="gradlint tests", GIT_AUTHOR_EMAIL="tests@gradlint.invalid",
        GIT_COMMITTER_NAME="gradlint tests", GIT_COMMITTER_EMAIL="tests@gradlint.invalid",
    )
    return env


def run(cmd: list[str | Path], cwd: Path, env: dict[str, str], *, check: bool = True,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    start = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    print(f"[{time.perf_counter() - start:5.1f}s] rc={proc.returncode} {' '.join(map(str, cmd))[:160]}")
    if check and proc.returncode != 0:
        pytest.fail(f"command failed (rc={proc.returncode}): {cmd}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def git_init(path: Path, env: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    run(["git", "init", "-q"], path, env)
    run(["git", "config", "user.name", "gradlint tests"], path, env)
    run(["git", "config", "user.email", "tests@gradlint.invalid"], path, env)
    run(["git", "config", "commit.gpgsign", "false"], path, env)
    return path


def pre_commit(*args: str | Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "pre_commit", *args], cwd, env, check=False)


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("precommit")


@pytest.fixture(scope="module")
def env(tmp_module: Path) -> dict[str, str]:
    return base_env(tmp_module / "pre-commit-home")


@pytest.fixture(scope="module")
def hook_repo(tmp_module: Path, env: dict[str, str]) -> tuple[Path, str]:
    """The checkout, committed into its own temporary git repo: (path, commit sha)."""
    repo = copy_checkout(tmp_module / "gradlint-hook-repo")
    assert (repo / ".pre-commit-hooks.yaml").is_file(), "the checkout has no .pre-commit-hooks.yaml"
    git_init(repo, env)
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-q", "-m", "gradlint under test"], repo, env)
    run(["git", "tag", RELEASE_TAG], repo, env)
    sha = run(["git", "rev-parse", "HEAD"], repo, env).stdout.strip()
    return repo, sha


@pytest.fixture()
def project(tmp_path: Path, env: dict[str, str]) -> Path:
    """A user's repo: bad.py (a GL101), clean.py, empty.py, notes.txt, one initial empty commit."""
    repo = git_init(tmp_path / "project", env)
    run(["git", "commit", "-q", "--allow-empty", "-m", "init"], repo, env)
    (repo / "bad.py").write_text(BAD)
    (repo / "clean.py").write_text(CLEAN)
    (repo / "empty.py").write_text("")
    (repo / "notes.txt").write_text("not python\n")
    return repo


def test_try_repo_fails_on_gl101(hook_repo: tuple[Path, str], project: Path, env: dict[str, str]) -> None:
    run(["git", "add", "bad.py"], project, env)
    proc = pre_commit("try-repo", hook_repo[0], "gradlint", "--files", "bad.py", cwd=project, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"expected the hook to fail (rc 1), got {proc.returncode}\n{out}"
    assert "Failed" in out and "GL101" in out, out
    assert "bad.py:8:" in out, out


def test_try_repo_passes_clean_files(hook_repo: tuple[Path, str], project: Path, env: dict[str, str]) -> None:
    run(["git", "add", "clean.py", "empty.py"], project, env)
    proc = pre_commit("try-repo", hook_repo[0], "gradlint", "--files", "clean.py", "empty.py",
                      "--verbose", cwd=project, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"expected the hook to pass\n{out}"
    assert "Passed" in out, out


@pytest.fixture()
def installed(hook_repo: tuple[Path, str], project: Path, env: dict[str, str]) -> Path:
    """project with a .pre-commit-config.yaml naming the hook repo, and the git hook installed."""
    repo_path, sha = hook_repo
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {repo_path}\n    rev: {sha}\n    hooks:\n      - id: gradlint\n"
    )
    run(["git", "add", ".pre-commit-config.yaml", "notes.txt"], project, env)
    run(["git", "commit", "-q", "--no-verify", "-m", "config"], project, env)
    proc = pre_commit("install", cwd=project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = pre_commit("install-hooks", cwd=project, env=env)  # builds the env once per PRE_COMMIT_HOME
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return project


def _head(project: Path, env: dict[str, str]) -> str:
    return run(["git", "rev-parse", "HEAD"], project, env).stdout.strip()


def test_hook_blocks_a_commit_with_gl101(installed: Path, env: dict[str, str]) -> None:
    before = _head(installed, env)
    run(["git", "add", "bad.py", "clean.py"], installed, env)
    proc = run(["git", "commit", "-m", "leaky"], installed, env, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"the commit went through despite a GL101\n{out}"
    assert "GL101" in out and "gradlint" in out, out
    assert _head(installed, env) == before, "a commit was created"


def test_hook_lets_a_clean_commit_through(installed: Path, env: dict[str, str]) -> None:
    before = _head(installed, env)
    run(["git", "add", "clean.py", "empty.py"], installed, env)
    proc = run(["git", "commit", "-m", "clean"], installed, env, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "gradlint" in out and "Passed" in out, out
    assert _head(installed, env) != before


def test_hook_with_zero_python_files(installed: Path, env: dict[str, str]) -> None:
    # A commit with no Python file in it: the hook is skipped and the commit goes through.
    (installed / "notes.txt").write_text("still not python\n")
    run(["git", "add", "notes.txt"], installed, env)
    proc = run(["git", "commit", "-m", "notes"], installed, env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # An empty commit, and `--all-files` over a repo whose tracked files hold no Python.
    proc = run(["git", "commit", "--allow-empty", "-m", "empty"], installed, env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = pre_commit("run", "--all-files", cwd=installed, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # `--files` naming only a non-Python file.
    proc = pre_commit("run", "--files", "notes.txt", cwd=installed, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ----- the README's snippet, at the release tag ---------------------------------------------

def readme_snippet() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## pre-commit\n", 1)[1].split("\n## ", 1)[0]
    (snippet,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    return snippet


def test_the_readme_snippet_names_the_release_tag_of_this_version() -> None:
    import yaml  # pre-commit's own dependency

    (repo,) = yaml.safe_load(readme_snippet())["repos"]
    assert repo["rev"] == RELEASE_TAG
    assert [hook["id"] for hook in repo["hooks"]] == ["gradlint-fix", "gradlint"]
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert {hook["id"]: hook["entry"] for hook in hooks} == {"gradlint": "gradlint check",
                                                             "gradlint-fix": "gradlint check --fix"}


def _configure(project: Path, hook_repo: tuple[Path, str], snippet: str, env: dict[str, str]) -> None:
    # The snippet as the README has it; only the repository's address points at the local copy.
    config = snippet.replace("https://github.com/gradlint/gradlint", str(hook_repo[0]))
    assert config != snippet
    (project / ".pre-commit-config.yaml").write_text(config)
    run(["git", "add", ".pre-commit-config.yaml"], project, env)


def test_readme_snippet_fixes_a_leaky_file_then_passes(hook_repo: tuple[Path, str], project: Path,
                                                       env: dict[str, str]) -> None:
    _configure(project, hook_repo, readme_snippet(), env)
    run(["git", "add", "bad.py", "clean.py"], project, env)
    proc = pre_commit("run", "--all-files", cwd=project, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "gradlint (apply safe fixes)" in out and "files were modified by this hook" in out, out
    fixed = (project / "bad.py").read_text()
    assert "ctx.save_for_backward(out)" in fixed and "ctx.out" not in fixed, fixed
    again = pre_commit("run", "--all-files", cwd=project, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("Passed") == 2, again.stdout


def test_check_hook_at_the_tag_fails_on_a_leak_the_fix_cannot_fix(hook_repo: tuple[Path, str], project: Path,
                                                                  env: dict[str, str]) -> None:
    check_only = readme_snippet().replace("      - id: gradlint-fix", "      # - id: gradlint-fix")
    _configure(project, hook_repo, check_only, env)
    run(["git", "add", "clean.py"], project, env)
    proc = pre_commit("run", "--all-files", cwd=project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # backward returns one gradient for two inputs: GL201, which has no fix.
    (project / "short.py").write_text(CLEAN.replace("class ", "class Short", 1).replace(
        "def forward(ctx, x)", "def forward(ctx, x, scale)"))
    run(["git", "add", "short.py"], project, env)
    proc = pre_commit("run", "--all-files", cwd=project, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "short.py:" in out and "GL201" in out, out
