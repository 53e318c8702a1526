"""Bad input gets one clear line and a documented exit code, never a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradlint.cli import main
from gradlint.config import Settings
from gradlint.engine import RuleSet, lint_source

FIXTURES = Path(__file__).parent / "fixtures"
RULESET = RuleSet.from_settings(Settings())


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _one_finding(output: str, code: str) -> str:
    lines = [line for line in output.splitlines() if f": {code} " in line]
    assert len(lines) == 1, output
    return lines[0]


def test_syntax_error_is_a_gl000_finding_at_its_line_and_the_run_goes_on(project):
    (project / "broken.py").write_text("import torch\n\nclass F(torch.autograd.Function):\n    def forward(ctx, x:\n")
    shutil.copy(FIXTURES / "leaky_op.py", project / "leaky.py")
    (project / "plain.py").write_text("def f(:\n    pass\n")
    result = run("check", ".")
    assert result.exit_code == 1
    assert "broken.py:4:16: GL000 syntax error: '(' was never closed" in result.output
    assert "plain.py:1:7: GL000 syntax error: invalid syntax" in result.output  # no autograd code: still checked
    assert "leaky.py:8:9: GL101" in result.output


def test_python_3_12_syntax_is_checked_on_an_older_python_too(project):
    # CPython 3.10/3.11 reject `type` statements and type parameters; libcst reads them, so the
    # file is linted rather than reported as GL000. A real syntax error still is.
    (project / "generic_op.py").write_text(
        "import torch\n\ntype Pair = tuple[torch.Tensor, torch.Tensor]\n\n"
        "class Exp[T](torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        out = x.exp()\n        ctx.out = out\n        return out\n")
    (project / "plain.py").write_text("type Alias = int\nx: Alias = 1\n")
    result = run("check", ".")
    assert result.exit_code == 1
    assert "generic_op.py:9:9: GL101" in result.output and "GL000" not in result.output


def test_non_utf8_file(project):
    (project / "latin.py").write_bytes(b"# caf\xe9\nimport torch\n")
    result = run("check", "latin.py")
    assert result.exit_code == 1
    assert _one_finding(result.output, "GL001") == "latin.py:1:1: GL001 not valid UTF-8 (byte 0xe9 on line 1)"


def test_nul_bytes(project):
    (project / "nul.py").write_bytes(b"import torch\x00\n")
    assert "contains a NUL byte at offset 12" in _one_finding(run("check", "nul.py").output, "GL001")


def test_symlink_loop(project):
    os.symlink("b.py", project / "a.py")
    os.symlink("a.py", project / "b.py")
    result = run("check", ".")
    assert result.exit_code == 1
    assert result.output.count("GL001 symlink loop") == 2


def test_unreadable_entries(project):
    (project / "dir.py").mkdir()
    os.mkfifo(project / "pipe.py")
    result = run("check", "pipe.py", "dir.py")
    assert "pipe.py:1:1: GL001 not a regular file" in result.output
    assert result.exit_code in (0, 1)


def test_huge_file_is_refused_with_a_message_not_parsed(project):
    line = "x = torch.autograd.Function  # padding padding padding padding\n"
    (project / "huge.py").write_text(line * (10 * 1024 * 1024 // len(line)))
    result = run("check", "huge.py")
    assert result.exit_code == 1
    assert "over the 1.0 MB limit (max-file-size)" in _one_finding(result.output, "GL001")


@pytest.mark.parametrize("source", [
    "import torch\nx = " + "(" * 500 + "1" + ")" * 500 + "\n",
    "import torch\nx = " + "[" * 500 + "1" + "]" * 500 + "\n",
    "import torch\nclass F(torch.autograd.Function):\n    pass\n" + "".join("    " * i + "if x:\n" for i in range(120)) + "    " * 120 + "pass\n",
    "import torch\ny = " + " + ".join(["x"] * 5000) + "\n",
])
def test_deep_nesting_gives_a_message_not_a_crash(source):
    result = lint_source(source, "deep.py", RULESET)
    assert result.internal_error is None
    for finding in result.findings:
        assert finding.code in ("GL000", "GL001")


AUTOGRAD_SNIPPETS = [
    "import torch\n", "class F(torch.autograd.Function):\n", "    @staticmethod\n", "    def forward(ctx, x, k=3):\n",
    "        out = x.exp()\n", "        ctx.out = out[1:]\n", "        ctx.save_for_backward(x.argsort())\n",
    "        return out, None\n", "    def backward(ctx, g):\n", "        return (g,) + (None,) * 2\n",
    "losses = []\n", "for x in loader:\n", "    loss = model(x).sum()\n", "    loss.backward()\n",
    "    losses.append(loss)\n", "    total += loss\n", "class M(nn.Module):\n", "    def forward(self, x):\n",
    "        self.h = self.cell(x, self.h)\n", "        setattr(ctx, 'a', out)\n", "        a, *b = ctx.saved_tensors\n",
    "    with torch.no_grad():\n", "        yield from x\n", "lambda: (yield)\n", "x[...] = 1\n",
    "        return\n", "@torch.library.custom_op('a::b', mutates_args=())\n", "f.register_autograd(g, setup_context=h)\n",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(AUTOGRAD_SNIPPETS), max_size=25), st.integers(0, 10_000), st.text(max_size=6))
def test_fuzz_mutated_autograd_sources_never_raise(snippets, cut, junk):
    source = "".join(snippets)
    position = cut % (len(source) + 1)
    mutated = source[:position] + junk + source[position:]
    for text in (source, mutated):
        result = lint_source(text, "fuzz.py", RULESET)
        assert result.internal_error is None, (result.internal_error, text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_random_text_never_raises(text):
    result = lint_source("import torch\n" + text, "fuzz.py", RULESET)
    assert result.internal_error is None
