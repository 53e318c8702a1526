"""The statement-level parse the language server keeps between lints (gradlint/parse.py): the module
put together from kept statements writes back the exact source and gives the same findings as a
whole parse; a statement whose text is unchanged comes back as the same nodes, with what was worked
out from them; anything out of the ordinary is parsed whole."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from gradlint import deep, parse
from gradlint.config import Settings
from gradlint.engine import RuleSet, lint_source

RULESET = RuleSet.from_settings(Settings())
ROOT = Path(__file__).resolve().parent.parent

TRAINING = textwrap.dedent("""\
    # a training script
    import torch
    from torch import nn


    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = x * 2
            ctx.out = out  # kept on ctx
            return out

        @staticmethod
        def backward(ctx, grad):
            return grad * 2
        # after backward


    def schedule(step, warmup=100):
        return min(1.0, step / warmup)


    def train(model, loader, optimizer):
        total = 0
        for batch in loader:
            loss = model(batch).sum()
            loss.backward()
            optimizer.step()
            total += loss
        return total

    # the end
    """)


@pytest.fixture
def kept():
    parse.forget()
    parse.keep(parse.EDITOR_KEPT_TEXT)
    yield
    parse.keep(0)


def _parsed(source: str) -> cst.Module:
    tree = compile(source, "t.py", "exec", ast.PyCF_ONLY_AST)
    return deep.call(lambda: parse.parse_module(source, tree), len(source))


def _codes(result) -> list[tuple[str, int, int]]:
    return [(f.code, f.line, f.column) for f in result.findings]


def test_the_kept_statements_write_back_the_source_and_find_what_a_whole_parse_finds(kept):
    module = _parsed(TRAINING)
    assert module.code == TRAINING
    assert [type(s) for s in module.body] == [type(s) for s in cst.parse_module(TRAINING).body]
    whole = lint_source(TRAINING, "train.py", RuleSet.from_settings(Settings()))
    assert _codes(whole) == [("GL101", 10, 9), ("GL104", 29, 9)]
    parse.keep(0)
    assert _codes(lint_source(TRAINING, "train.py", RULESET)) == _codes(whole)


def test_a_change_to_one_statement_reparses_that_statement_only(kept):
    first = _parsed(TRAINING)
    changed = TRAINING.replace("warmup=100", "warmup=250")
    second = _parsed(changed)
    assert second.code == changed
    reused = [a is b for a, b in zip(first.body, second.body)]
    schedule = next(i for i, s in enumerate(first.body) if getattr(s, "name", None) and s.name.value == "schedule")
    assert reused == [i != schedule for i in range(len(first.body))]


def test_a_change_keeps_the_findings_and_their_lines(kept):
    assert _codes(lint_source(TRAINING, "train.py", RULESET)) == [("GL101", 10, 9), ("GL104", 29, 9)]
    # Two lines more above the loop: the kept train() is placed at its new lines.
    changed = TRAINING.replace("    return min(1.0, step / warmup)\n",
                               "    if step < 0:\n        return 0.0\n    return min(1.0, step / warmup)\n")
    assert _codes(lint_source(changed, "train.py", RULESET)) == [("GL101", 10, 9), ("GL104", 31, 9)]
    # The finding goes when the total is made a number, and comes back with the old text.
    fixed = TRAINING.replace("total += loss", "total += loss.item()")
    assert _codes(lint_source(fixed, "train.py", RULESET)) == [("GL101", 10, 9)]
    assert _codes(lint_source(TRAINING, "train.py", RULESET)) == [("GL101", 10, 9), ("GL104", 29, 9)]


def test_what_is_worked_out_from_a_statement_is_kept_with_it(kept):
    module = _parsed(TRAINING)
    calls = []
    answer = parse.memo("t", module.body[3], module.body[3], lambda: calls.append(1) or "first")
    again = parse.memo("t", module.body[3], _parsed(TRAINING).body[3], lambda: calls.append(1) or "second")
    assert (answer, again, len(calls)) == ("first", "first", 1)
    parse.forget()  # the chunk is gone, and with it what was kept for it
    assert parse.memo("t", module.body[3], module.body[3], lambda: "third") == "third"


def test_a_statement_written_twice_in_one_file_gets_nodes_of_its_own(kept):
    source = "import torch\n\nprint(1)\n\nprint(1)\n"
    module = _parsed(source)
    assert module.code == source
    assert module.body[1] is not module.body[2]  # the analysis tells nodes apart by identity


@pytest.mark.parametrize("source", [
    "def f():\n    return 1\n\n\ndef g():\n\treturn 2\n",  # spaces in one def, a tab in the next
    "x = 1\r\ny = 2\nz = 3\n",  # mixed line endings
    "\ufeffx = 1\ny = 2\n",  # a byte-order mark
    "x = 1\ny = 2",  # no line break at the end
], ids=["mixed-indentation", "mixed-newlines", "bom", "no-final-newline"])
def test_what_statements_cannot_agree_on_is_parsed_whole(kept, source):
    tree = compile(source.lstrip("\ufeff"), "t.py", "exec", ast.PyCF_ONLY_AST)
    assert parse._assemble(source, tree) is None
    assert parse.parse_module(source, tree).code == cst.parse_module(source).code


def test_the_kept_text_stays_within_its_budget(kept):
    parse.keep(200)
    for n in range(50):
        _parsed(f"x_{n} = {n}\n" * 3 + f"def f_{n}():\n    return {n}\n")
    assert 0 < parse._kept_text <= 200 + 40  # the newest chunk is always kept
    assert len(parse._owners) == sum(len(c.statements) for c in parse._chunks.values())


def test_a_run_over_files_keeps_nothing():
    parse.forget()
    _parsed(TRAINING)
    assert not parse._chunks  # gradlint check parses each file whole, once


@pytest.mark.parametrize("path", sorted(
    [*(ROOT / "examples").rglob("*.py"), *(ROOT / "tests" / "corpus").rglob("*.py"),
     *(ROOT / "tests" / "fixtures").rglob("*.py"), *(ROOT / "gradlint").glob("*.py")]),
    ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_of_ours_writes_back_and_lints_alike(kept, path):
    source = path.read_text(encoding="utf-8")
    try:
        tree = compile(source, str(path), "exec", ast.PyCF_ONLY_AST)
    except SyntaxError:
        tree = None  # a fixture that is broken on purpose: the engine reports it, nothing to parse
    if tree is None:
        assert [f.code for f in lint_source(source, str(path), RULESET).findings] == ["GL000"]
        return
    assembled = deep.call(lambda: parse._assemble(source, tree), len(source))
    if assembled is not None:
        assert assembled.code == source
    kept_findings = lint_source(source, str(path), RULESET).findings
    again = lint_source(source, str(path), RULESET).findings  # from what was kept
    parse.keep(0)
    assert kept_findings == again == lint_source(source, str(path), RULESET).findings


def test_in_the_editor_the_prechecks_stop_once_a_rule_takes_the_file_to_the_analysis(kept, monkeypatch):
    from gradlint import engine

    asked: list[str] = []
    precheck = engine._precheck
    monkeypatch.setattr(engine, "_precheck", lambda rule, tree: asked.append(rule.code) or precheck(rule, tree))
    kept_findings = lint_source(TRAINING, "train.py", RULESET).findings
    in_editor = list(asked)
    parse.keep(0)
    asked.clear()
    assert lint_source(TRAINING, "train.py", RULESET).findings == kept_findings
    # GL101's precheck passes (a Function is there): the rules after it go without theirs
    assert in_editor == ["GL101"] and len(asked) > 5


def test_nodes_made_outside_a_parse_are_still_validated():
    # parse.parse skips libcst's validation of what its parser makes; a node built anywhere else
    # (a fix's new code) is checked as before, also after a parse that failed.
    with pytest.raises(cst.CSTValidationError):
        cst.SimpleWhitespace("\n")
    assert parse.parse("x = 1\n").code == "x = 1\n"
    with pytest.raises(cst.ParserSyntaxError):
        parse.parse("x = (\n")
    with pytest.raises(cst.CSTValidationError):
        cst.SimpleWhitespace("\n")


def test_the_node_classes_read_by_exact_type_have_no_subclasses():
    # The hot walks test libcst nodes by exact type (`type(e) is cst.Call`, flow._LITERALS): an
    # isinstance goes through ABCMeta, several times the cost. That reads a node right only while
    # no class of libcst derives from the one tested: checked here on the installed libcst.
    import re

    from gradlint import flow

    root = Path(__file__).resolve().parents[1]
    named = {name for package in ("gradlint", "rules") for path in (root / package).rglob("*.py")
             for name in re.findall(r"\bis (?:not )?cst\.(\w+)", path.read_text())}
    classes = {getattr(cst, name) for name in named} | flow._LITERALS | flow._COMPREHENSIONS
    assert cst.Call in classes and cst.SimpleString in classes  # the search finds what is there
    assert {c.__name__: c.__subclasses__() for c in classes if c.__subclasses__()} == {}
