"""noqa comments: per line, per code, file-wide; strings that look like comments do not count."""

from __future__ import annotations

import textwrap

from gradlint.config import Settings
from gradlint.engine import RuleSet, lint_source

OP = textwrap.dedent("""
    import torch
    class Exp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = x.exp()
            ctx.a = out{a}
            ctx.b = x{b}
            return out
""")


def codes_and_lines(source: str) -> list[tuple[str, int]]:
    result = lint_source(source, "op.py", RuleSet.from_settings(Settings()))
    return [(f.code, f.line) for f in result.findings]


def test_unsuppressed_baseline():
    assert codes_and_lines(OP.format(a="", b="")) == [("GL101", 7), ("GL101", 8)]


def test_noqa_with_the_code_silences_that_line_only():
    assert codes_and_lines(OP.format(a="  # noqa: GL101", b="")) == [("GL101", 8)]


def test_noqa_with_another_code_does_not_silence():
    assert codes_and_lines(OP.format(a="  # noqa: E501", b="")) == [("GL101", 7), ("GL101", 8)]


def test_bare_noqa_and_gradlint_ignore():
    assert codes_and_lines(OP.format(a="  # noqa", b="  # gradlint: ignore[GL101]")) == []


def test_file_wide_noqa_on_its_own_line():
    assert codes_and_lines("# gradlint: noqa\n" + OP.format(a="", b="")) == []
    # GL301 has no finding in the file: the comment silences nothing, and GL002 says so.
    assert codes_and_lines("# gradlint: noqa: GL301\n" + OP.format(a="", b="")) == [
        ("GL002", 1), ("GL101", 8), ("GL101", 9)]


def test_noqa_inside_a_string_does_not_count():
    source = OP.format(a='; note = "# noqa"', b="")
    assert ("GL101", 7) in codes_and_lines(source)


def test_noqa_after_a_multi_line_string_covers_the_lines_it_spans():
    # `ctx.a = out` starts on a line that ends inside the string: a comment cannot go there.
    source = OP.format(a='; ctx.doc = """first\n    second"""  # noqa: GL101', b="")
    assert codes_and_lines(source) == [("GL101", 9)]


def test_noqa_after_a_backslash_continuation_covers_the_joined_lines():
    source = OP.format(a="", b="").replace("ctx.a = out\n", "ctx.a = \\\n        out  # noqa: GL101\n")
    assert codes_and_lines(source) == [("GL101", 9)]


def test_noqa_on_the_next_statement_does_not_reach_back():
    source = OP.format(a="", b="  # noqa: GL101")
    assert codes_and_lines(source) == [("GL101", 7)]
