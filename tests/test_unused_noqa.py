"""GL002: a `# noqa: GLxxx` (or `# gradlint: ignore[...]`, or a file-wide `# gradlint: noqa: ...`)
that silenced no finding, or that names a GL code gradlint does not have, is reported with a
safe fix that removes it; other tools' codes, bare noqa and codes the file is not checked for
are left alone, and nothing is said of a file whose check did not finish."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradlint import engine
from gradlint.cache import ResultCache
from gradlint.check import CheckRequest, run_check
from gradlint.cli import main
from gradlint.config import ConfigError, Settings
from gradlint.engine import RuleSet, fix_source, lint_file, lint_source
from gradlint.findings import Applicability, Severity
from gradlint.fixes import apply_fixes
from gradlint.registry import rule_by_code
from gradlint.suppressions import find_suppressions, may_hold_our_codes, unused_message

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEFAULT = RuleSet.from_settings(Settings())

# Two GL101 findings: `ctx.a = out` on line 7, `ctx.b = x` on line 8; `y = x + 1` (line 9) has none.
OP = textwrap.dedent("""\
    import torch


    class Exp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.a = x.exp(){a}
            ctx.b = x{b}
            y = x + 1{c}
            return y
""")


def lint(source: str, ruleset: RuleSet = DEFAULT):
    return lint_source(source, "op.py", ruleset).findings


def unused(source: str, ruleset: RuleSet = DEFAULT):
    return [f for f in lint(source, ruleset) if f.code == "GL002"]


def fixed(source: str, ruleset: RuleSet = DEFAULT) -> str:
    result = fix_source(source, "op.py", ruleset, unsafe=False)
    return source if result.fixed_source is None else result.fixed_source


def run(*args: str):
    return CliRunner().invoke(main, ["check", *args], catch_exceptions=False)


# ----- what is reported, where, and what it says ------------------------------------------

def test_a_noqa_that_silenced_its_finding_is_used_and_one_on_a_clean_line_is_not():
    source = OP.format(a="  # noqa: GL101", b="", c="  # noqa: GL101")
    (finding,) = unused(source)
    line = source.splitlines()[8]
    assert (finding.line, finding.column) == (9, line.index("#") + 1)
    assert finding.end_line == 9 and finding.end_column == len(line) + 1
    assert finding.name == "unused-noqa" and finding.severity is Severity.ERROR
    assert finding.message == "unused `noqa` for GL101; remove it"
    assert [(f.code, f.line) for f in lint(source) if f.code != "GL002"] == [("GL101", 8)]


def test_a_noqa_without_the_code_of_its_lines_finding_is_unused_too():
    # GL103 is checked in this file and has no finding on line 8: the GL101 there stays reported.
    source = OP.format(a="", b="  # noqa: GL103", c="")
    assert [(f.code, f.line) for f in lint(source)] == [("GL101", 7), ("GL101", 8), ("GL002", 8)]
    assert unused(source)[0].message == "unused `noqa` for GL103; remove it"


def test_each_kind_of_directive_is_named_in_the_message():
    source = "# gradlint: noqa: GL301\n" + OP.format(a="", b="", c="  # gradlint: ignore[GL101]")
    assert [(f.line, f.column, f.message) for f in unused(source)] == [
        (1, 1, "unused `gradlint: noqa` for GL301; remove it"),
        (10, 20, "unused `gradlint: ignore` for GL101; remove it")]


def test_an_unknown_gl_code_is_reported_as_unknown():
    source = OP.format(a="  # noqa: GL101, GL999", b="", c="  # noqa: GL998, gl101")
    assert [(f.line, f.message) for f in unused(source)] == [
        (7, "unknown code GL999 in `noqa`; remove it"),
        (9, "unused `noqa` for GL101 and unknown code GL998; remove them")]


def test_noqa_for_the_engine_s_own_codes_is_unused_everywhere():
    # No comment silences GL000 or GL001 (a file with either is not checked further).
    source = OP.format(a="", b="", c="  # noqa: GL000, GL001")
    assert [f.message for f in unused(source)] == ["unused `noqa` for GL000, GL001; remove them"]


def test_a_long_list_of_codes_keeps_the_message_to_one_short_line():
    codes = [f"GL{n}" for n in range(900, 920)]
    message = unused_message("gradlint: ignore", codes, codes)
    assert message == ("unused `gradlint: ignore` for GL900, GL901 (+18 more) and unknown codes GL900, GL901 "
                       "(+18 more); remove them")
    assert len(message) <= 120
    assert unused_message("noqa", codes, []) == "unused `noqa` for GL900, GL901, GL902 (+17 more); remove them"
    source = OP.format(a="", b="", c="  # gradlint: ignore[" + ", ".join(codes) + "]")
    (finding,) = unused(source)
    assert finding.message == "unknown codes GL900, GL901, GL902 (+17 more) in `gradlint: ignore`; remove them"


def test_usage_is_per_comment_not_per_line_after_a_multi_line_string():
    # `ctx.a = ...` is on line 7, which ends inside a string: the noqa after the closing quotes,
    # on line 8, silences it, and is used by it.
    source = OP.format(a='; ctx.doc = """first\n    second"""  # noqa: GL101', b="", c="")
    assert [(f.code, f.line) for f in lint(source)] == [("GL101", 9)]
    # The same comment naming a code with no finding in the run reports that code only.
    source = OP.format(a='; ctx.doc = """first\n    second"""  # noqa: GL101, GL103', b="", c="")
    assert [(f.line, f.message) for f in unused(source)] == [(8, "unused `noqa` for GL103; remove it")]
    assert fixed(source) == OP.format(a='; ctx.doc = """first\n    second"""  # noqa: GL101', b="", c="")


def test_usage_is_per_comment_after_a_backslash_continuation():
    source = OP.format(a="", b="", c="").replace("ctx.a = x.exp()\n", "ctx.a = \\\n        x.exp()  # noqa: GL101\n")
    assert [(f.code, f.line) for f in lint(source)] == [("GL101", 9)]


def test_two_comments_with_the_same_code_are_judged_each_on_its_own():
    source = OP.format(a="  # noqa: GL101", b="  # noqa: GL101", c="  # noqa: GL101")
    assert [(f.line, f.message) for f in unused(source)] == [(9, "unused `noqa` for GL101; remove it")]


def test_a_file_wide_and_a_line_noqa_for_the_same_finding_are_both_kept():
    # Either alone silences the finding; the fix of one would not be wrong, but a fix that took
    # both (one finding each) would bring the finding back: neither is reported.
    source = "# gradlint: noqa: GL101\n" + OP.format(a="  # noqa: GL101", b="", c="")
    assert lint(source) == []


def test_a_file_the_rules_gates_leave_out_has_every_noqa_unused():
    # No torch, no autograd: no rule runs on this file, so no GL101 can be silenced in it.
    source = "x = 1  # noqa: GL101\ny = 2  # noqa: E501\n"
    assert [(f.line, f.column, f.message) for f in unused(source)] == [(1, 8, "unused `noqa` for GL101; remove it")]
    assert fixed(source) == "x = 1\ny = 2  # noqa: E501\n"


def test_a_file_the_prechecks_leave_out_has_every_noqa_unused():
    # The text holds GL101's markers ("autograd", "def forward"); the prechecks find no Function.
    source = "import torch  # noqa: GL101\nclass M:\n    def forward(self, x):\n        return x.autograd\n"
    assert "GL101" in [r.code for r in engine._rules_marked_in(source, DEFAULT.rules)]
    result = lint_source(source, "m.py", DEFAULT)
    assert not result.analyzed
    assert [(f.code, f.message) for f in result.findings] == [("GL002", "unused `noqa` for GL101; remove it")]


def test_an_analyzed_file_with_no_finding_at_all_has_every_noqa_unused():
    source = OP.format(a="", b="", c="").replace("ctx.a = x.exp()\n        ctx.b = x\n",
                                                 "ctx.save_for_backward(x)  # noqa: GL101\n")
    result = lint_source(source, "op.py", DEFAULT)
    assert result.analyzed
    assert [(f.code, f.line) for f in result.findings] == [("GL002", 7)]


# ----- what is never reported ------------------------------------------------------------

@pytest.mark.parametrize("comment", [
    "  # noqa: E501", "  # noqa: BLE001 - on purpose", "  # noqa", "  # noqa:E501,W291", "  # NOQA",
    "  # type: ignore  # noqa: F401", "  # noqa: GLX1", "  # see the noqa: GL101 note above",
    "  # noqa: GL002",
])
def test_other_tools_codes_and_bare_noqa_are_never_reported(comment):
    assert unused(OP.format(a="", b="", c=comment)) == []


def test_bare_file_wide_noqa_is_not_reported_and_silences_gl002_too():
    source = "# gradlint: noqa\n" + OP.format(a="", b="", c="  # noqa: GL101")
    assert lint(source) == []


def test_noqa_gl002_keeps_its_directive():
    source = OP.format(a="", b="", c="  # noqa: GL101, GL002")
    assert unused(source) == []
    assert unused(OP.format(a="", b="", c="  # noqa: GL101  # noqa: GL002")) == []


@pytest.mark.parametrize("settings", [
    Settings(select=("GL2", "GL002")),  # GL101 not selected
    Settings(ignore=("GL101",)),
    Settings(ignore=("GL1",)),
])
def test_a_code_the_file_is_not_checked_for_is_not_reported(settings):
    ruleset = RuleSet.from_settings(settings)
    assert engine.UNUSED_NOQA[0] in ruleset.engine
    assert unused(OP.format(a="", b="", c="  # noqa: GL101"), ruleset) == []
    # An unknown code is unknown whatever is selected.
    assert [f.message for f in unused(OP.format(a="", b="", c="  # noqa: GL101, GL999"), ruleset)] == [
        "unknown code GL999 in `noqa`; remove it"]


def test_an_off_by_default_rule_s_code_is_not_reported():
    assert not rule_by_code("GL303").default_enabled
    assert unused(OP.format(a="", b="", c="  # noqa: GL303")) == []
    on = RuleSet.from_settings(Settings(extend_select=("GL303",)))
    assert [f.message for f in unused(OP.format(a="", b="", c="  # noqa: GL303"), on)] == [
        "unused `noqa` for GL303; remove it"]


@pytest.mark.parametrize("settings", [Settings(ignore=("GL002",)), Settings(select=("GL1",)),
                                      Settings(select=("GL101",))])
def test_gl002_can_be_turned_off_like_any_code(settings):
    ruleset = RuleSet.from_settings(settings)
    assert ruleset.engine == frozenset()
    assert unused(OP.format(a="", b="", c="  # noqa: GL101, GL999"), ruleset) == []
    # per-file-ignores: the CLI's RuleSet.without
    assert DEFAULT.without(frozenset({"GL002"})).engine == frozenset()


def test_gl002_is_a_selector_the_configuration_accepts(project):
    (project / "op.py").write_text(OP.format(a="", b="", c="  # noqa: GL101"))
    # `--select GL002` alone checks no rule: GL101 is not checked, so its noqa is not judged.
    selected = run("--no-cache", "--select", "GL002", "op.py")
    assert selected.exit_code == 0 and selected.output.startswith("All checks passed!"), selected.output
    got = run("--no-cache", "--select", "GL101,GL002", "op.py")
    assert got.exit_code == 1 and "op.py:9:20: GL002 [*] unused `noqa` for GL101; remove it\n" in got.output
    assert "GL002" not in run("--no-cache", "--ignore", "GL002", "op.py").output
    (project / "pyproject.toml").write_text(
        '[tool.gradlint]\nper-file-ignores = {"op.py" = ["GL002"]}\nseverity = {GL002 = "warning"}\n')
    assert "GL002" not in run("--no-cache", "op.py").output
    (project / "pyproject.toml").write_text('[tool.gradlint]\nseverity = {GL002 = "note"}\n')
    outcome = run_check(CheckRequest(paths=[project / "op.py"], no_cache=True))
    assert [f.severity for f in outcome.findings if f.code == "GL002"] == [Severity.NOTE]


def test_an_unknown_selector_is_still_refused():
    with pytest.raises(ConfigError, match="unknown rule selector 'GL003'"):
        Settings(ignore=("GL003",)).check_selectors(engine.selectable_codes())
    Settings(ignore=("GL002",)).check_selectors(engine.selectable_codes())  # no error


def test_nothing_is_said_when_the_check_did_not_finish(monkeypatch):
    broken = OP.format(a="", b="", c="  # noqa: GL101") + "def (:\n"
    assert [f.code for f in lint(broken)] == ["GL000"]
    rule = rule_by_code("GL101")

    def crash(self, model):
        raise RuntimeError("boom")

    monkeypatch.setattr(type(rule), "check", crash)
    result = lint_source(OP.format(a="", b="", c="  # noqa: GL101"), "op.py", DEFAULT)
    assert result.internal_error == "RuntimeError: boom" and result.findings == []


def test_a_file_too_large_to_analyze_reports_gl001_only(monkeypatch):
    def no_stack(function, size=0):
        raise engine.deep.NoStack("a 2 GiB stack")

    monkeypatch.setattr(engine.deep, "call", no_stack)
    assert [f.code for f in lint(OP.format(a="", b="", c="  # noqa: GL101"))] == ["GL001"]


# ----- the fix -----------------------------------------------------------------------------

@pytest.mark.parametrize("comment, left", [
    ("  # noqa: GL101", ""),
    ("  # noqa: E501, GL101", "  # noqa: E501"),
    ("  # noqa: GL101, E501", "  # noqa: E501"),
    ("  # noqa: GL103, E501, GL101, W291", "  # noqa: E501, W291"),
    ("  #noqa:gl101,E501", "  #noqa:E501"),
    ("  # noqa: GL101 because the tensor is tiny", "  # because the tensor is tiny"),
    ("  # noqa: GL101  # type: ignore", "  # type: ignore"),
    ("  # type: ignore  # noqa: GL101", "  # type: ignore"),
    ("  # type: ignore  # noqa: GL101, GL999", "  # type: ignore"),
    ("  # gradlint: ignore[GL101]", ""),
    ("  # gradlint: ignore[GL101, E501]", "  # gradlint: ignore[E501]"),
    ("\t# noqa: GL101   ", ""),
])
def test_the_fix_removes_the_codes_or_the_directive(comment, left):
    source = OP.format(a="", b="", c=comment)
    (finding,) = unused(source)
    assert finding.fix is not None and finding.fix.applicability is Applicability.SAFE
    once, count = apply_fixes(source, [finding], unsafe=False)
    assert count == 1 and once == OP.format(a="", b="", c=left)
    assert unused(once) == []


def test_two_directives_in_one_comment_go_one_after_the_other():
    source = OP.format(a="", b="", c="  # noqa: GL101  # gradlint: ignore[GL102]")
    assert [f.message for f in unused(source)] == ["unused `noqa` for GL101; remove it",
                                                 "unused `gradlint: ignore` for GL102; remove it"]
    assert fixed(source) == OP.format(a="", b="", c="")


def test_the_fix_messages_say_what_goes():
    (whole,) = unused(OP.format(a="", b="", c="  # noqa: GL101"))
    (part,) = unused(OP.format(a="", b="", c="  # gradlint: ignore[GL101, E501]"))
    assert whole.fix.message == "Remove the unused `noqa`"
    assert part.fix.message == "Remove GL101 from the `gradlint: ignore`"


def test_a_file_wide_directive_goes_with_its_line_or_keeps_its_used_codes():
    body = OP.format(a="", b="", c="")
    assert fixed("# gradlint: noqa: GL301\n" + body) == body
    kept = "# gradlint: noqa: GL101, GL301\n" + body
    assert [f.message for f in unused(kept)] == ["unused `gradlint: noqa` for GL301; remove it"]
    assert fixed(kept) == "# gradlint: noqa: GL101\n" + body


@pytest.mark.parametrize("below", ["# -*- coding: utf-8 -*-\n", "#!/usr/bin/env python\n"])
def test_the_fix_never_moves_a_coding_cookie_or_a_shebang_into_the_first_lines(below):
    # Python reads the cookie on line 1 or 2 only: deleting line 1 would put line 3 there.
    source = "# gradlint: noqa: GL101\n\n" + below + "x = 1\n"
    assert fixed(source) == "\n\n" + below + "x = 1\n"
    source = "# gradlint: noqa: GL101\nx = 1\n" + below
    assert fixed(source) == "\nx = 1\n" + below
    # On line 4 it stays out of Python's reach (line 3) once line 1 goes.
    source = "# gradlint: noqa: GL101\nx = 1\ny = 2\n" + below
    assert fixed(source) == "x = 1\ny = 2\n" + below


def test_the_fix_keeps_crlf_line_breaks():
    source = OP.format(a="", b="", c="  # noqa: GL101").replace("\n", "\r\n")
    assert fixed(source) == OP.format(a="", b="", c="").replace("\n", "\r\n")
    standalone = "x = 1\r\n# gradlint: noqa: GL101\r\ny = 2\r\n"
    assert fixed(standalone) == "x = 1\r\ny = 2\r\n"


def test_fix_on_the_command_line_applies_it_and_is_idempotent(project):
    path = project / "op.py"
    path.write_text(OP.format(a="  # noqa: GL101", b="  # noqa: E501, GL103", c="  # noqa: GL999 kept text"))
    first = run("--no-cache", "--fix", "op.py")
    assert "Fixed 2 findings in 1 file." in first.output, first.output
    after = OP.format(a="  # noqa: GL101", b="  # noqa: E501", c="  # kept text")
    assert path.read_text() == after
    second = run("--no-cache", "--fix", "op.py")
    assert "Fixed" not in second.output and "GL002" not in second.output
    assert path.read_text() == after
    assert "GL002" not in run("--no-cache", "--diff", "op.py").output


# ----- with --add-noqa, the cache and the language server -------------------------------------

def test_add_noqa_then_check_reports_none_of_the_added_comments(project):
    shutil.copy(EXAMPLES / "knn_scatter_leaky.py", project / "knn.py")
    shutil.copy(EXAMPLES / "train_leaky.py", project / "train.py")
    # A finding on a line that ends inside a string: its noqa goes after the closing quotes.
    (project / "op.py").write_text(OP.format(a='; ctx.doc = """first\n    second"""', b="", c=""))
    added = run("--no-cache", "--add-noqa", ".")
    assert added.exit_code == 0, added.output
    assert '    second"""  # noqa: GL101\n' in (project / "op.py").read_text()
    assert run("--no-cache", ".").output == "All checks passed! (3 files checked)\n"


def test_add_noqa_leaves_a_gl002_finding_to_the_fix(project):
    path = project / "op.py"
    path.write_text(OP.format(a="", b="", c="  # noqa: GL101"))
    added = run("--no-cache", "--add-noqa", "op.py")
    # Two GL101 silenced; the unused noqa is still reported (exit 1), not silenced with another.
    assert added.exit_code == 1 and "Added 2 noqa directives in 1 file." in added.output
    assert "op.py:9:20: GL002 [*] unused `noqa` for GL101; remove it" in added.output
    assert "GL002" not in path.read_text()
    assert run("--no-cache", "--fix", "op.py").exit_code == 0
    assert path.read_text() == OP.format(a="  # noqa: GL101", b="  # noqa: GL101", c="")


def test_the_cache_keeps_gl002_with_its_fix_and_the_ruleset_is_in_its_key(tmp_path):
    path = tmp_path / "op.py"
    path.write_text(OP.format(a="", b="", c="  # noqa: GL101"))
    cache = ResultCache(tmp_path / "cache", ResultCache.build_key(), secret=b"k" * 32)
    first = lint_file(str(path), DEFAULT, 1 << 20, cache=cache)
    again = lint_file(str(path), DEFAULT, 1 << 20, cache=cache)
    assert again.cached and [(f.code, f.line, f.message, f.fix) for f in again.findings] == \
        [(f.code, f.line, f.message, f.fix) for f in first.findings]
    assert any(f.code == "GL002" and f.fix is not None for f in again.findings)
    off = DEFAULT.without(frozenset({"GL002"}))
    assert off.key(1 << 20) != DEFAULT.key(1 << 20)
    quiet = lint_file(str(path), off, 1 << 20, cache=cache)
    assert not quiet.cached and all(f.code != "GL002" for f in quiet.findings)


def test_the_language_server_publishes_gl002_with_its_fix(tmp_path):
    from gradlint.server import Projects, lint_document

    path = tmp_path / "op.py"
    text = OP.format(a="", b="", c="  # noqa: GL101")
    lint = lint_document(text, path, Projects(tmp_path))
    (finding,) = [f for f in lint.findings if f.code == "GL002"]
    assert finding.fix is not None
    assert apply_fixes(text, [finding], unsafe=False)[0] == OP.format(a="", b="", c="")


# ----- the fast path -----------------------------------------------------------------------

def test_only_a_file_whose_comments_name_a_gl_code_is_tokenized_without_findings(monkeypatch):
    calls = []
    real = engine.find_suppressions
    monkeypatch.setattr(engine, "find_suppressions", lambda source: calls.append(source) or real(source))
    clean = "import torch\nx = torch.ones(3)  # noqa: E501\n"
    assert lint(clean) == [] and calls == []
    assert lint("import os  # noqa: F401, gl101\n")[0].message == "unused `noqa` for GL101; remove it"
    assert len(calls) == 1


@pytest.mark.parametrize("text, holds", [
    ("x = 1  # noqa: E501\n", False),
    ("x = 1\n", False),
    ("GL101 = 1  # noqa: E501\n", False),
    ("x = 1  # noqa: E501, GL101\n", True),
    ("x = 1  # noqa:gl101\n", True),
    ("x = 1  # gradlint: ignore[E501, GL101]\n", True),
    ("# gradlint: NOQA: GL101\n", True),
    ("x = 1  # NOQA: GL101\n", False),  # find_suppressions reads no noqa in a file without "noqa"
])
def test_the_text_test_before_the_tokenizer(text, holds):
    assert may_hold_our_codes(text) is holds
    if not holds:  # it never misses a directive the suppressions would read
        assert not any(c.startswith("GL") for d in find_suppressions(text).directives for c, _, _ in d.codes)


try:
    import pytest_lsp
    from lsprotocol import types
    from pygls.protocol import default_converter
    from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
    from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features
except ImportError:  # the `lsp` extra is not installed: tests/test_server.py is skipped too
    pytest_lsp = None

if pytest_lsp is not None:
    import asyncio
    import sys
    import time

    def _client() -> LanguageClient:
        """pytest-lsp's client, which also accepts the server's registration of its file watchers."""
        client = LanguageClient(converter_factory=default_converter)
        register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.CLIENT_REGISTER_CAPABILITY: lambda *_: None})
        return client

    @pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "gradlint.server"],
                                                  client_factory=_client))
    async def editor(lsp_client: LanguageClient, tmp_path: Path):
        (tmp_path / "pyproject.toml").write_text("[tool.gradlint]\n")
        await lsp_client.initialize_session(types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri=tmp_path.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=tmp_path.as_uri(), name="project")]))
        yield
        await lsp_client.shutdown_session()

    @pytest.mark.asyncio
    async def test_the_editor_gets_gl002_and_its_fix_as_a_code_action(editor: LanguageClient, tmp_path: Path):
        path = tmp_path / "op.py"
        text = OP.format(a="", b="", c="  # noqa: E501, GL101")
        path.write_text(text)
        uri = path.as_uri()
        editor.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=text)))
        deadline = time.monotonic() + 60
        while uri not in editor.diagnostics and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        (diagnostic,) = [d for d in editor.diagnostics[uri] if d.code == "GL002"]
        assert diagnostic.message == "unused `noqa` for GL101; remove it"
        assert list(diagnostic.tags) == [types.DiagnosticTag.Unnecessary]  # faded, as ruff's RUF100
        line = text.splitlines()[8]
        assert (diagnostic.range.start.line, diagnostic.range.start.character) == (8, line.index("#"))
        actions = await editor.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic])))
        # The fix, and no "add `# noqa: GL002`" (a noqa for a noqa: the fix is the answer).
        (action,) = [a for a in actions if "GL002" in a.title]
        assert action.title == "Remove GL101 from the `noqa` (GL002)" and action.is_preferred
        (change,) = action.edit.document_changes
        (edit,) = change.edits
        assert edit.new_text == "E501"
        assert (edit.range.start.line, edit.range.end.line) == (8, 8)
        assert line[edit.range.start.character:edit.range.end.character] == "E501, GL101"
