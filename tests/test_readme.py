"""The README stays true: its Quick start is what CI runs, every `$ gradlint check` it shows prints
what it says, its install lines name our distribution, and its rule table is current.

`python tests/test_readme.py --update` rewrites the outputs shown in the README from what gradlint
prints now (after a rule's message changes); the tests then pass on the new text.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
README_PATH = ROOT / "README.md"
README = README_PATH.read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

# A ```console block: `$ command` lines, each followed by what it prints (stdout and stderr).
_CONSOLE = re.compile(r"```console\n(.*?)```", re.S)


def _quick_start_commands() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def console_sessions(readme: str) -> list[list[tuple[str, str]]]:
    """Each console block as [(command, shown output)], in order."""
    sessions = []
    for block in _CONSOLE.findall(readme):
        steps: list[tuple[str, str]] = []
        for line in block.splitlines(keepends=True):
            if line.startswith("$ "):
                steps.append((line[2:].strip(), ""))
            else:
                assert steps, f"console block output before any command:\n{block}"
                steps[-1] = (steps[-1][0], steps[-1][1] + line)
        sessions.append(steps)
    return sessions


def run_session(commands: list[str]) -> list[str]:
    """Run a block's `gradlint ...` commands in order in a fresh copy of examples/ (a command may
    write files: a baseline, noqa comments) and return what each printed, stderr with stdout."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "examples", Path(tmp) / "examples", ignore=shutil.ignore_patterns("__pycache__"))
        outputs = []
        for command in commands:
            argv = shlex.split(command)
            assert argv[0] == "gradlint", f"the README shows a command that is not gradlint's: {command}"
            completed = subprocess.run([sys.executable, "-m", "gradlint", *argv[1:]], cwd=tmp,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env={**os.environ, "COLUMNS": "100"})
            assert completed.returncode in (0, 1), f"{command}: exit {completed.returncode}\n{completed.stdout}"
            outputs.append(completed.stdout)
        return outputs


def _sample_block(readme: str) -> str:
    return readme.split("The first command exits 1", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]


def _examples_output() -> str:
    completed = subprocess.run([sys.executable, "-m", "gradlint", "check", "examples/"], cwd=ROOT,
                               capture_output=True, text=True)
    assert completed.returncode == 1, completed.stderr
    return completed.stdout


def test_quick_start_has_exactly_two_commands_and_ci_runs_the_second():
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert "gradlint check examples/" in commands[0]
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()


def test_sample_output_is_what_gradlint_prints_on_the_examples():
    assert _examples_output() == _sample_block(README)


def test_every_gradlint_command_shown_prints_what_the_readme_says():
    sessions = console_sessions(README)
    assert len(sessions) >= 4  # full output, baseline, add-noqa, github annotations
    for steps in sessions:
        printed = run_session([command for command, _ in steps])
        for (command, shown), got in zip(steps, printed):
            assert got == shown, f"`{command}` prints something else now; run `python tests/test_readme.py " \
                                 f"--update`\n--- README\n{shown}--- gradlint\n{got}"


def test_the_shown_outputs_are_real_outputs():
    # The README's sessions show what a user must see: a caret, a baseline written then quiet, noqa added.
    shown = "".join(output for steps in console_sessions(README) for _, output in steps)
    assert "^^^" in shown and "= help: " in shown
    assert "gradlint: wrote baseline gradlint-baseline.json with " in shown
    assert "findings in the baseline not shown." in shown
    assert re.search(r"Added \d+ noqa directives in 2 files\.", shown)
    assert "::error title=gradlint (GL10" in shown


def test_install_lines_name_our_distribution_not_the_other_gradlint():
    name = PROJECT["name"]
    assert name != "gradlint"  # the PyPI name gradlint is an unrelated diffusion-MRI tool
    assert f"pip install {name}" in README and f"pip install '{name}[torch]'" in README
    assert "--index-url https://download.pytorch.org/whl/cpu" in README
    assert not re.search(r"pip install '?gradlint\b", README)
    assert "torch" not in " ".join(PROJECT["dependencies"])  # `pip install NAME` keeps the user's torch


def test_the_pre_commit_rev_is_this_version_s_tag():
    section = README.split("\n## pre-commit\n", 1)[1].split("\n## ", 1)[0]
    assert f"rev: v{PROJECT['version']}\n" in section


def test_rule_table_lists_every_rule_with_its_severity():
    from gradlint.registry import all_rules

    for rule in all_rules():
        fix = rule.fix_safety or "-"
        assert f"| {rule.code} | {rule.name} | {rule.severity.value} | {fix} | {rule.summary} |" in README


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_probe_options_and_exit_codes_shown_are_the_cli_s():
    section = _section("Probe your training")
    usage = section.split("```text\n", 1)[1].split("```", 1)[0]
    shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-m)\b", usage))
    assert {"-m", "--steps", "--json", "--quiet"} <= shown
    help_text = subprocess.run([sys.executable, "-m", "gradlint", "probe", "--help"], capture_output=True,
                               text=True, check=True).stdout
    for option in shown:
        assert re.search(rf"(?<![\w-]){re.escape(option)}\b", help_text), f"README shows {option}; gradlint probe has none"
    # Every exit code the probe's CLI documents is in the README's list, with the same meaning for 3.
    from gradlint.runtime_probe import cli

    documented = {int(code) for code in re.findall(r"(?<![\w.])(\d+) (?:no leak|a leak|usage|nothing|interrupted|stopped)",
                                                     cli.__doc__)}
    assert documented == {0, 1, 2, 3, 130, 143}
    codes = section.split("### Exit codes\n", 1)[1].strip().split("\n\n", 1)[0]
    for code in documented:
        assert re.search(rf"(?<!\d){code}\s", codes), f"exit code {code} is not in the README"
    assert "3 nothing measured" in codes


def test_editor_snippets_start_the_server_the_cli_has():
    section = _section("Editor")
    assert "pip install 'torch-gradlint[lsp]'" in section
    snippets = re.findall(r"```(json|lua|toml)\n(.*?)```", section, re.S)
    assert [lang for lang, _ in snippets] == ["json", "lua", "toml"]
    for _, body in snippets:
        assert "gradlint" in body and "server" in body
    toml = tomllib.loads(snippets[2][1])
    assert toml["language-server"]["gradlint"] == {"command": "gradlint", "args": ["server"]}
    assert "gradlint" in toml["language"][0]["language-servers"]
    completed = subprocess.run([sys.executable, "-m", "gradlint", "server", "--help"], capture_output=True, text=True)
    assert completed.returncode == 0 and "LSP over stdio" in completed.stdout


def update() -> None:
    """Rewrite the README's shown outputs from what gradlint prints now."""
    text = README
    text = text.replace(_sample_block(text), _examples_output(), 1)

    def rewrite(match: re.Match[str]) -> str:
        (steps,) = console_sessions(match.group(0))
        commands = [command for command, _ in steps]
        printed = run_session(commands)
        return "```console\n" + "".join(f"$ {c}\n{out}" for c, out in zip(commands, printed)) + "```"

    text = _CONSOLE.sub(rewrite, text)
    README_PATH.write_text(text)
    print(f"{README_PATH}: {'rewritten' if text != README else 'already current'}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_readme.py --update")
    os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="gradlint-readme-"))
    update()
