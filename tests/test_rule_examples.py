"""Every rule's own VALID and INVALID examples, run without naming any rule."""

from __future__ import annotations

import re

import pytest

from gradlint.engine import RuleSet, fix_source, lint_source
from gradlint.registry import all_rules

RULES = all_rules()


def _only(rule) -> RuleSet:
    return RuleSet((rule,), {})


VALID = [pytest.param(rule, source, id=f"{rule.code}-valid{i}") for rule in RULES for i, source in enumerate(rule.VALID)]
INVALID = [pytest.param(rule, case, id=f"{rule.code}-invalid{i}") for rule in RULES for i, case in enumerate(rule.INVALID)]
FIXED = [pytest.param(rule, case, id=f"{rule.code}-fixed{i}") for rule in RULES
         for i, case in enumerate(rule.INVALID) if case.fixed is not None]


def test_every_rule_has_examples_and_a_complete_doc():
    assert RULES, "no rules were found in gradlint.rules"
    for rule in RULES:
        assert rule.VALID and rule.INVALID, rule.code
        for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
            assert heading in rule.doc, (rule.code, heading)
        assert rule.markers and rule.summary and rule.name


def test_rule_codes_and_names_are_unique_and_stable_in_shape():
    codes = [r.code for r in RULES]
    names = [r.name for r in RULES]
    assert len(set(codes)) == len(codes) and len(set(names)) == len(names)
    assert all(len(c) == 5 and c.startswith("GL") and c[2:].isdigit() for c in codes)


@pytest.mark.parametrize("rule, source", VALID)
def test_valid_example_is_not_flagged(rule, source):
    result = lint_source(source, "valid.py", _only(rule))
    assert result.internal_error is None
    assert [f for f in result.findings if f.code == rule.code] == []


@pytest.mark.parametrize("rule, case", INVALID)
def test_invalid_example_is_flagged_on_exactly_the_marked_lines(rule, case):
    result = lint_source(case.source, "invalid.py", _only(rule))
    assert result.internal_error is None
    lines = case.source.splitlines()
    expected = {n for n, text in enumerate(lines, 1) for marker in case.flagged if marker in text}
    assert len(expected) == len(case.flagged), "each marker must name one line"
    flagged = {f.line for f in result.findings if f.code == rule.code}
    assert flagged == expected
    assert all(f.message and f.column >= 1 for f in result.findings)


def test_rules_with_fixes_document_their_safety_and_show_a_fix():
    for rule in RULES:
        fixed_examples = [case for case in rule.INVALID if case.fixed is not None]
        if rule.fix_safety:
            assert rule.fix_safety in ("safe", "unsafe", "safe or unsafe"), rule.code
            assert "## Fix safety" in rule.doc, rule.code
            assert fixed_examples, f"{rule.code} declares fixes but no INVALID example shows one"
        else:
            assert not fixed_examples and "## Fix safety" not in rule.doc, rule.code


# ruff's shape: a message is one clause that says what is wrong and what to do; the measured why
# is in the rule's doc (`gradlint rule GLxxx`). 120 characters with the names it interpolates.
MAX_MESSAGE = 120
# A sentence ends where a full stop, `!` or `?` is followed by more text: "... collector. Use ...".
# Code in a message has no space after its dots (`ctx.save_for_backward(...)`, `x.t()`).
SENTENCE_BREAK = re.compile(r"[.!?]\s+\S")


@pytest.mark.parametrize("rule, case", INVALID)
def test_every_message_is_one_sentence_of_at_most_120_characters(rule, case):
    result = lint_source(case.source, "invalid.py", _only(rule))
    messages = [f.message for f in result.findings if f.code == rule.code]
    assert messages
    for message in messages:
        assert len(message) <= MAX_MESSAGE, f"{len(message)} characters: {message}"
        assert "\n" not in message and not SENTENCE_BREAK.search(message), f"more than one sentence: {message}"


def test_the_sentence_check_sees_two_sentences_and_not_code():
    assert SENTENCE_BREAK.search("ctx.out holds its own output (measured). Use ctx.save_for_backward(out)")
    assert not SENTENCE_BREAK.search("ctx.out holds its own output: a cycle; use ctx.save_for_backward(...)")


@pytest.mark.parametrize("rule, case", FIXED)
def test_fix_gives_the_expected_source_and_is_idempotent(rule, case):
    ruleset = _only(rule)
    result = fix_source(case.source, "invalid.py", ruleset, unsafe=True)
    assert result.internal_error is None
    # `fixed` equal to the source: an example of a case the rule must leave alone.
    assert result.fixed_source == (None if case.fixed == case.source else case.fixed)
    assert compile(case.fixed, "fixed.py", "exec")
    # What is left has no fix to offer, and fixing again changes nothing.
    assert all(f.fix is None for f in result.findings if f.code == rule.code)
    assert fix_source(case.fixed, "invalid.py", ruleset, unsafe=True).fixed_source is None
    before = len([f for f in lint_source(case.source, "invalid.py", ruleset).findings if f.code == rule.code])
    after = len([f for f in lint_source(case.fixed, "invalid.py", ruleset).findings if f.code == rule.code])
    assert after == before - result.fixes_applied


@pytest.mark.parametrize("rule, case", FIXED)
def test_safe_only_fixes_leave_the_unsafe_ones(rule, case):
    result = fix_source(case.source, "invalid.py", _only(rule), unsafe=False)
    assert result.internal_error is None
    left = [f for f in result.findings if f.code == rule.code and f.fix is not None]
    assert all(f.fix.applicability.value == "unsafe" for f in left)
