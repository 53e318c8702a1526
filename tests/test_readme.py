"""The README stays true: its test command is what CI runs, its rule table and sample are current."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gradlint.registry import all_rules

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _quick_start_commands() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_quick_start_has_exactly_two_commands_and_ci_runs_the_second():
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert "gradlint check examples/" in commands[0]
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()


def test_rule_table_lists_every_rule_with_its_severity():
    for rule in all_rules():
        fix = rule.fix_safety or "-"
        assert f"| {rule.code} | {rule.name} | {rule.severity.value} | {fix} | {rule.summary} |" in README


def test_sample_output_is_what_gradlint_prints_on_the_examples():
    sample = README.split("The first command exits 1", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    completed = subprocess.run([sys.executable, "-m", "gradlint", "check", "examples/"], cwd=ROOT,
                               capture_output=True, text=True)
    assert completed.returncode == 1
    assert completed.stdout == sample
