"""`--output-format full`: ruff's full format, the source line with a caret and the fix as help;
`concise` (one line a finding) stays the default, and `text` still names it."""

from __future__ import annotations

from click.testing import CliRunner

from gradlint.cli import main
from gradlint.findings import Finding
from gradlint.reporters import full


def run(*args: str, input: bytes | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_full_shows_the_line_a_caret_under_the_finding_and_the_fix_as_help(leaky_file):
    result = run("check", "--output-format", "full", "--no-cache", "leaky_op.py")
    assert result.exit_code == 1
    blocks = result.output.split("\n\n")
    gl101 = blocks[0].splitlines()
    assert gl101[0].startswith("leaky_op.py:8:9: GL101 [*] ")
    assert gl101[1:7] == [
        "   |",
        " 6 |     def forward(ctx, src, index, dim_size):",
        " 7 |         out = src.new_zeros(dim_size, src.size(1)).index_add_(0, index, src)",
        " 8 |         ctx.out = out",
        "   |         ^^^^^^^ GL101",
        " 9 |         ctx.save_for_backward(index)",
    ]
    assert gl101[-1].startswith("   = help: ")
    assert "save_for_backward" in gl101[-1]
    gl201 = blocks[1].splitlines()
    assert gl201[0].startswith("leaky_op.py:15:9: GL201 ")
    assert "   |         " + "^" * len("return grad.index_select(0, index)") + " GL201" in gl201
    assert not any("help:" in line for line in gl201)  # GL201 has no fix
    assert result.output.endswith("Found 2 findings (2 errors) in 1 of 1 file checked.\n[*] 1 fixable with --fix.\n")


def test_concise_is_the_default_and_text_is_its_old_name(leaky_file):
    default = run("check", "--no-cache", "leaky_op.py").output
    assert default == run("check", "--output-format", "concise", "--no-cache", "leaky_op.py").output
    assert default == run("check", "--output-format", "text", "--no-cache", "leaky_op.py").output
    assert default.splitlines()[0].startswith("leaky_op.py:8:9: GL101 [*] ")
    assert "^" not in default


def test_full_from_stdin_shows_the_stdin_text(project, leaky_file):
    result = run("check", "--output-format", "full", "--stdin-filename", "pkg/op.py", "-",
                 input=leaky_file.read_bytes())
    assert result.exit_code == 1
    assert " 8 |         ctx.out = out\n   |         ^^^^^^^ GL101\n" in result.output


def test_tabs_and_wide_characters_keep_the_caret_under_the_code():
    source = "def f():\n\tx = '数据'; ctx.out = out\n"
    finding = Finding("op.py", 2, 12, "GL101", "a message", end_line=2, end_column=19)
    shown = full([finding], sources={"op.py": source}).splitlines()
    # Column 12 is `ctx`, after 11 characters that take 16 cells: the tab 4, each CJK character 2.
    assert shown[3] == "2 |     x = '数据'; ctx.out = out"
    assert shown[4] == "  |                 ^^^^^^^ GL101"


def test_a_control_character_in_the_source_is_escaped_and_the_caret_follows_it():
    source = "x = '\x1b[31m'; ctx.out = out\n"
    finding = Finding("op.py", 1, 15, "GL101", "m", end_line=1, end_column=22)
    shown = full([finding], sources={"op.py": source}).splitlines()
    assert shown[2] == r"1 | x = '\x1b[31m'; ctx.out = out"
    assert shown[3] == "  | " + " " * 17 + "^" * 7 + " GL101"


def test_a_file_that_cannot_be_read_gets_its_line_and_no_snippet(project):
    (project / "bad.py").write_bytes(b"x = '\xff'\n")
    result = run("check", "--output-format", "full", "--no-cache", "bad.py")
    assert result.exit_code == 1
    assert result.output.startswith("bad.py:1:1: GL001 not valid UTF-8 (byte 0xff on line 1)\n\n")


def test_a_syntax_error_gets_a_single_caret_at_its_column(project):
    (project / "broken.py").write_text("import torch\n\ndef f(x:\n    pass\n")
    result = run("check", "--output-format", "full", "--no-cache", "broken.py")
    lines = result.output.splitlines()
    assert lines[0].startswith("broken.py:3:6: GL000 syntax error")
    assert "3 | def f(x:" in lines
    assert "  |      ^ GL000" in lines
