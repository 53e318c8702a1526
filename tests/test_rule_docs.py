"""docs/rules/GL101.md, ...: one page per code, generated from the rule classes, where every url points."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from gradlint import ruledocs
from gradlint.cli import main
from gradlint.registry import all_rules

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "rules"


def test_docs_rules_is_what_the_rule_classes_generate():
    problems = ruledocs.differences(DOCS)
    assert not problems, "docs/rules is out of date with rules/*.py: run `python -m gradlint.ruledocs`\n" \
        + "\n".join(problems)


def test_every_code_has_a_page_with_its_doc_and_examples():
    for rule in all_rules():
        page = (DOCS / f"{rule.code}.md").read_text(encoding="utf-8")
        assert page.startswith(f"# {rule.code}: {rule.name}\n")
        assert rule.doc.strip() in page
        assert "## Fix safety" in page
        for example in rule.INVALID:
            assert example.source.strip("\n") in page
    for code in ("GL000", "GL001"):
        assert (DOCS / f"{code}.md").is_file()


def test_a_changed_doc_makes_the_pages_stale(tmp_path, monkeypatch):
    ruledocs.write(tmp_path)
    assert ruledocs.differences(tmp_path) == []
    rule = all_rules()[0]
    monkeypatch.setattr(type(rule), "doc", rule.doc + "\nOne more sentence.\n")
    assert ruledocs.differences(tmp_path) == [f"{tmp_path / (rule.code + '.md')}: stale"]
    (tmp_path / "GL998.md").write_text("a code that is gone\n")
    monkeypatch.undo()
    assert ruledocs.differences(tmp_path) == [f"{tmp_path / 'GL998.md'}: no such code any more"]


def test_check_mode_exits_1_on_stale_pages_and_writes_nothing(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "gradlint.ruledocs", "--check", "--dir", str(tmp_path)],
                               capture_output=True, text=True)
    assert completed.returncode == 1
    assert f"{tmp_path / 'GL101.md'}: missing" in completed.stderr
    assert list(tmp_path.iterdir()) == []
    written = subprocess.run([sys.executable, "-m", "gradlint.ruledocs", "--dir", str(tmp_path)],
                             capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    again = subprocess.run([sys.executable, "-m", "gradlint.ruledocs", "--check", "--dir", str(tmp_path)],
                           capture_output=True, text=True)
    assert again.returncode == 0 and again.stderr == ""


def test_every_finding_url_names_a_page_that_exists():
    result = CliRunner().invoke(main, ["check", "--output-format", "json", "--no-cache", str(ROOT / "examples")])
    records = json.loads(result.output)
    assert records
    prefix = f"{ruledocs.REPOSITORY_URL}/blob/main/"
    for record in records:
        assert record["url"] == f"{prefix}docs/rules/{record['code']}.md"
        assert (ROOT / record["url"][len(prefix):]).is_file()


def test_gradlint_rule_names_the_page_and_explains_engine_codes():
    shown = CliRunner().invoke(main, ["rule", "GL101"])
    assert shown.exit_code == 0
    assert f"Docs: {ruledocs.rule_url('GL101')}" in shown.output
    syntax = CliRunner().invoke(main, ["rule", "gl000"])
    assert syntax.exit_code == 0
    assert syntax.output.startswith("# syntax-error (GL000)\n") and "## What it does" in syntax.output
