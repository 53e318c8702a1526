"""The rules' markers are read in the code: comments and string literals left out (code_text.py)."""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from pathlib import Path

import pytest

from gradlint import engine
from gradlint.code_text import code_only
from gradlint.config import Settings
from gradlint.engine import RuleSet, lint_source

DEFAULT = RuleSet.from_settings(Settings())
ROOT = Path(__file__).resolve().parents[1]


def code(source: str) -> str:
    ast.parse(source)  # Python, as the engine gives it
    return code_only(source)


@pytest.mark.parametrize("source, gone, kept", [
    ("x = 1  # then loss.backward()\n", ".backward(", "x = 1"),
    ('def f():\n    """Call loss.backward() after."""\n    return 1\n', ".backward(", "return 1"),
    ("s = b'.backward('\n", ".backward(", "s ="),
    ("s = rb'model(x)'\n", "model(", "s ="),
    ("s = Br'model(x)'\n", "model(", "s ="),
    ("s = u'model(x)'\n", "model(", "s ="),
    # A `#` in a string starts no comment: what follows the string is code.
    ('s = "#"; loss.backward()\n', "#", ".backward("),
    ('s = """a\n# b\n"""; loss.backward()\n', "# b", ".backward("),
    # A quote in a comment starts no string.
    ("x = 1  # it's\nloss.backward()  # model(x)\n", "model(", ".backward("),
    # An escaped quote and a line continuation stay inside their string.
    ('s = "a \\" model(x) \\\n#"; loss.backward()\n', "model(", ".backward("),
    ("s = '''a \\''' model(x)'''; loss.backward()\n", "model(", ".backward("),
    ('s = """a "" model(x)"""; loss.backward()\n', "model(", ".backward("),
    ('s = "héllo wörld"; loss.backward()  # model(x)\n', "model(", ".backward("),
    # Implicitly joined strings with a comment between them: all of it goes.
    ('s = ("a"  # model(x)\n     "b")\nloss.backward()\n', "model(", ".backward("),
])
def test_comments_and_strings_go_code_stays(source, gone, kept):
    text = code(source)
    assert gone not in text
    assert kept in text


@pytest.mark.parametrize("source", [
    's = f"{model(x)} #1"; loss.backward()\n',
    's = rf"{model(x)}"; loss.backward()\n',
    "s = Fr'''{model(x)}\n#'''; loss.backward()\n",
])
def test_an_f_string_stays_whole_and_its_hash_is_no_comment(source):
    # The code in its braces stays (3.12 nests quotes there): that can only let a rule in.
    text = code(source)
    assert "model(" in text and ".backward(" in text


def test_a_file_without_comments_or_strings_is_its_own_code():
    source = "import torch\nloss = model(x)\nloss.backward()\n"
    assert code(source) == source


def _tokenize_code(source: str) -> str:
    """The reference: the comments and (non-f) strings tokenize finds, each left out for a space."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT or token.type == tokenize.STRING \
                and not token.string.lstrip("rRbBuU").lower().startswith("f"):
            spans.append((starts[token.start[0] - 1] + token.start[1], starts[token.end[0] - 1] + token.end[1]))
    parts, done = [], 0
    for start, end in spans:
        parts.append(source[done:start])
        done = end
    parts.append(source[done:])
    return " ".join(parts)


def test_the_markers_found_are_tokenizes_on_our_own_sources():
    # Every rule's markers, against tokenize's reading of the same file: found in one, found in
    # the other (this file's own strings hold every kind of literal the expression reads).
    rules = DEFAULT.rules
    files = [*ROOT.joinpath("gradlint").glob("*.py"), *ROOT.joinpath("rules").glob("*.py"),
             *ROOT.joinpath("tests").glob("*.py"), *ROOT.joinpath("tests", "corpus").rglob("*.py"),
             *ROOT.joinpath("examples").glob("*.py")]
    compared = 0
    for path in files:
        source = path.read_text(encoding="utf-8")
        try:
            ast.parse(source)
        except SyntaxError:
            continue  # the corpus holds broken files on purpose
        ours = {r.code for r in engine._rules_marked_in(code_only(source), rules)}
        theirs = {r.code for r in engine._rules_marked_in(_tokenize_code(source), rules)}
        assert ours == theirs, path
        compared += 1
    assert compared > 150


DOC_ONLY = textwrap.dedent('''\
    import torch

    HISTORY = []


    def train(encoder, loader, opt):
        """Keeps each loss: call loss.backward() on them later."""
        for x in loader:
            loss = encoder(x).sum()
            HISTORY.append(loss)  # loss.backward() comes later
            opt.step()
    ''')


def test_a_step_mentioned_only_in_a_docstring_or_comment_takes_no_rule_to_the_analysis():
    # The raw text holds GL103's `.backward(`; the code does not: the file does not show training.
    assert "GL103" in [r.code for r in engine._rules_marked_in(DOC_ONLY, DEFAULT.rules)]
    result = lint_source(DOC_ONLY, "train.py", DEFAULT)
    assert not result.analyzed and not result.findings


def test_the_same_file_with_the_backward_in_code_is_analysed_and_reported():
    source = DOC_ONLY.replace("        opt.step()\n", "        loss.backward()\n        opt.step()\n")
    result = lint_source(source, "train.py", DEFAULT)
    assert result.analyzed
    assert [(f.code, f.line) for f in result.findings] == [("GL103", 10)]


def test_a_broken_file_with_markers_only_in_comments_still_reports_its_syntax_error():
    result = lint_source("# loss.backward()\ndef f(:\n", "broken.py", DEFAULT)
    assert [(f.code, f.line) for f in result.findings] == [("GL000", 2)]
