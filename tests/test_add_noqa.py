"""`gradlint check --add-noqa`: a `# noqa: CODE` on each finding's line, merged with what is there,
never where a comment cannot go; running it again changes nothing."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradlint.cli import main
from gradlint.findings import Finding
from gradlint.noqa import add_noqa

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(*args: str, input: bytes | None = None):
    return CliRunner().invoke(main, ["check", "--no-cache", *args], input=input, catch_exceptions=False)


def test_every_finding_gets_its_noqa_and_the_next_check_passes(project):
    shutil.copy(EXAMPLES / "knn_scatter_leaky.py", project / "knn.py")
    shutil.copy(EXAMPLES / "train_leaky.py", project / "train.py")
    before = {p.name: p.read_text() for p in project.glob("*.py")}
    result = run("--add-noqa", ".")
    assert result.exit_code == 0, result.output
    assert result.output == "Added 8 noqa directives in 2 files.\n"
    knn = (project / "knn.py").read_text().splitlines()
    # The examples' own explanatory comments stay; the noqa goes after them.
    assert "        ctx.out = out  # GL101: the Function's own output -> reference cycle  # noqa: GL101" in knn
    assert "        ctx.save_for_backward(knn)  # GL301: int64 index saved (8 bytes per element)  # noqa: GL301" in knn
    changed = [line for name in before for line in (project / name).read_text().splitlines()
               if line not in before[name].splitlines()]
    assert len(changed) == 8 and all(line.endswith(tuple(f"# noqa: GL{n}" for n in (101, 102, 103, 104, 201, 301, 302)))
                                     for line in changed)
    assert run(".").output == "All checks passed! (2 files checked)\n"
    again = run("--add-noqa", ".")
    assert again.exit_code == 0 and again.output == "Added 0 noqa directives in 0 files.\n"
    assert {p.name: p.read_text() for p in project.glob("*.py")} != before
    assert (project / "knn.py").read_text().splitlines() == knn


OP = textwrap.dedent('''\
    import torch


    class ScatterMean(torch.autograd.Function):
        @staticmethod
        def forward(ctx, src, index, dim_size):
            out = src.new_zeros(dim_size, src.size(1)).index_add_(0, index, src)
            ctx.out = out{comment}
            ctx.save_for_backward(index)
            return out

        @staticmethod
        def backward(ctx, grad):
            (index,) = ctx.saved_tensors
            return grad.index_select(0, index)
''')


@pytest.mark.parametrize(("comment", "expected"), [
    ("", "        ctx.out = out  # noqa: GL101"),
    ("  # noqa: E501", "        ctx.out = out  # noqa: E501, GL101"),
    ("  # noqa:E501,W291 long line", "        ctx.out = out  # noqa: E501, W291, GL101 long line"),
    ("  # type: ignore[attr-defined]", "        ctx.out = out  # type: ignore[attr-defined]  # noqa: GL101"),
    ("   ", "        ctx.out = out  # noqa: GL101"),
])
def test_an_existing_comment_is_kept_and_an_existing_noqa_gets_the_code(project, comment, expected):
    (project / "op.py").write_text(OP.format(comment=comment))
    result = run("--add-noqa", "op.py")
    assert result.output.startswith("Added 2 noqa directives in 1 file.\n")
    lines = (project / "op.py").read_text().splitlines()
    assert lines[7] == expected
    assert lines[14] == "        return grad.index_select(0, index)  # noqa: GL201"
    assert run("op.py").exit_code == 0


def test_a_line_ending_inside_a_multi_line_string_gets_its_noqa_after_the_closing_quotes(project):
    source = OP.format(comment='; ctx.note = """kept for\n        the backward"""')
    (project / "op.py").write_text(source)
    result = run("--add-noqa", "op.py")
    assert result.exit_code == 0, result.output
    assert result.output == "Added 2 noqa directives in 1 file.\n"
    text = (project / "op.py").read_text()
    assert text == source.replace('the backward"""\n', 'the backward"""  # noqa: GL101\n').replace(
        "return grad.index_select(0, index)\n", "return grad.index_select(0, index)  # noqa: GL201\n")
    assert run("op.py").exit_code == 0  # the comment after the string silences the line it starts on


def test_a_backslash_continuation_moves_the_noqa_to_the_statement_s_last_line(project):
    source = OP.format(comment="").replace("ctx.out = out\n", "ctx.out = \\\n            out\n")
    (project / "op.py").write_text(source)
    result = run("--add-noqa", "op.py")
    assert result.exit_code == 0, result.output
    assert "            out  # noqa: GL101\n" in (project / "op.py").read_text()
    assert run("op.py").exit_code == 0


def test_the_file_keeps_crlf_newlines_its_bom_and_its_mode(project):
    path = project / "op.py"
    path.write_bytes(b"\xef\xbb\xbf" + OP.format(comment="").replace("\n", "\r\n").encode())
    os.chmod(path, 0o640)
    assert run("--add-noqa", "op.py").exit_code == 0
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b"\n" not in data.replace(b"\r\n", b"")
    assert b"        ctx.out = out  # noqa: GL101\r\n" in data
    assert os.stat(path).st_mode & 0o777 == 0o640


def test_a_read_only_file_is_left_alone_and_said_so(project):
    path = project / "op.py"
    path.write_text(OP.format(comment=""))
    os.chmod(path, 0o444)
    result = run("--add-noqa", "op.py")
    assert result.exit_code == 1
    assert "gradlint: not changed: op.py: it is read-only\n" in result.output
    assert path.read_text() == OP.format(comment="")


def test_a_syntax_error_is_not_silenced(project):
    (project / "broken.py").write_text("def f(x:\n    pass\n")
    result = run("--add-noqa", "broken.py")
    assert result.exit_code == 1
    assert result.output.startswith("broken.py:1:6: GL000 ")
    assert (project / "broken.py").read_text() == "def f(x:\n    pass\n"


@pytest.mark.parametrize(("args", "message"), [
    (["--add-noqa", "--fix", "op.py"], "--add-noqa cannot be combined with --fix or --diff: fix first, then add "
                                       "noqa for what is left"),
    (["--add-noqa", "-"], "--add-noqa writes files; it cannot read stdin (`-`)"),
])
def test_add_noqa_with_fix_or_stdin_is_a_usage_error(project, args, message):
    (project / "op.py").write_text(OP.format(comment=""))
    result = run(*args, input=b"")
    assert result.exit_code == 2
    assert result.output == f"gradlint check: error: {message} (see `gradlint check --help`)\n"


def test_a_file_that_does_not_tokenize_is_left_as_it_is():
    source = 'x = f("""a\n'
    finding = Finding("op.py", 1, 1, "GL103", "m", end_line=1, end_column=9)
    result = add_noqa(source, [finding], frozenset({"GL103"}))
    assert result.source == source and result.added == 0
    assert result.skipped == [(finding, "the file does not tokenize")]
