"""`gradlint server` driven over stdio by a real LSP client (pytest-lsp), as an editor drives it.

Each test starts the server as `python -m gradlint.server`, opens documents of a project in a
temporary folder (with its own pyproject.toml), and checks what the client receives: the
diagnostics of each version, code actions applied as the editor applies them, hovers."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types  # noqa: E402 - after the skip: both come with the `lsp` extra
from pygls.protocol import default_converter  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features  # noqa: E402

from gradlint.check import CheckRequest, run_check  # noqa: E402
from gradlint.registry import rule_by_code  # noqa: E402

TARGETS = Path(__file__).parent / "lsp_targets"
PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS
PYPROJECT = """\
[tool.gradlint]
extend-exclude = ["generated"]
per-file-ignores = {"legacy_*.py" = ["GL101"]}
severity = {GL201 = "warning"}
"""


def _recording_client() -> LanguageClient:
    """pytest-lsp's client, keeping every publishDiagnostics in arrival order (its own
    `diagnostics` keeps the last per document, without the version)."""
    client = LanguageClient(converter_factory=default_converter)
    client.published = []
    client.registrations = []
    default = DEFAULT_CLIENT_FEATURES[PUBLISH]

    def record(client: LanguageClient, params: types.PublishDiagnosticsParams):
        client.published.append(params)
        default(client, params)

    def register(client: LanguageClient, params: types.RegistrationParams):
        client.registrations.extend(params.registrations)

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, PUBLISH: record, types.CLIENT_REGISTER_CAPABILITY: register})
    return client


CONFIG = ClientServerConfig(server_command=[sys.executable, "-m", "gradlint.server"], client_factory=_recording_client)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    for target in TARGETS.glob("*.py"):
        shutil.copy(target, tmp_path / target.name)
    return tmp_path


async def _start(client: LanguageClient, workspace: Path, spec: str):
    result = await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities(spec), root_uri=workspace.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="project")]))
    client.encoding = result.capabilities.position_encoding


@pytest_lsp.fixture(config=CONFIG)
async def client(lsp_client: LanguageClient, workspace: Path):
    """A VS Code client: UTF-16 positions, versioned workspace edits."""
    await _start(lsp_client, workspace, "visual-studio-code")
    yield
    if not lsp_client.stopped:  # the shutdown test has already stopped it
        await lsp_client.shutdown_session()


# VS Code: UTF-16 positions, versioned edits (documentChanges). Neovim 0.11: it offers UTF-8
# first, and takes plain `changes` edits.
@pytest_lsp.fixture(config=CONFIG, params=["visual-studio-code", "neovim@v0.11.0"])
async def editor(lsp_client: LanguageClient, workspace: Path, request):
    await _start(lsp_client, workspace, request.param)
    assert lsp_client.encoding == ("utf-8" if request.param.startswith("neovim") else "utf-16")
    yield
    if not lsp_client.stopped:  # the shutdown test has already stopped it
        await lsp_client.shutdown_session()


# ----- helpers: what an editor does --------------------------------------------------------

def _open(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=version, text=path.read_text() if text is None else text)))
    return uri


def _change(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


async def _diagnostics(client: LanguageClient, uri: str, version: int | None, timeout: float = 60) -> list:
    """The diagnostics the server published for this version of the document."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for params in client.published:
            if params.uri == uri and params.version == version:
                return list(params.diagnostics)
        await asyncio.sleep(0.01)
    raise AssertionError(f"no diagnostics for {uri} version {version}; got "
                         f"{[(p.uri, p.version) for p in client.published]}")


def _codes(diagnostics) -> list[str]:
    return sorted(d.code for d in diagnostics)


def _units(text: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(text.encode("utf-8"))
    return len(text.encode("utf-16-le")) // 2


def _offset(text: str, position: types.Position, encoding: str) -> int:
    """An LSP position as an index into `text` (lines broken at \\n, \\r\\n, \\r, as LSP says)."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    start = starts[position.line]
    index, units = start, 0
    while units < position.character:
        units += _units(text[index], encoding)
        index += 1
    return index


def _apply(text: str, edit: types.WorkspaceEdit, uri: str, encoding: str) -> str:
    """Apply a workspace edit to one document, as the client would: all ranges are in the text
    before the edit."""
    if edit.document_changes:
        (change,) = edit.document_changes
        assert change.text_document.uri == uri
        edits = change.edits
    else:
        edits = edit.changes[uri]
    spans = sorted(((_offset(text, e.range.start, encoding), _offset(text, e.range.end, encoding), e.new_text)
                    for e in edits), reverse=True)
    for start, end, new_text in spans:
        text = text[:start] + new_text + text[end:]
    return text


async def _actions(client: LanguageClient, uri: str, diagnostic: types.Diagnostic) -> list[types.CodeAction]:
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
        context=types.CodeActionContext(diagnostics=[diagnostic])))


def _one(diagnostics, code: str) -> types.Diagnostic:
    (found,) = [d for d in diagnostics if d.code == code]
    return found


# ----- the tests ---------------------------------------------------------------------------

@pytest.mark.asyncio
async def test_open_publishes_what_gradlint_check_reports(client: LanguageClient, workspace: Path):
    path = workspace / "scatter_mean.py"
    diagnostics = await _diagnostics(client, _open(client, path), 1)

    expected = run_check(CheckRequest(paths=[path], no_cache=True)).findings
    assert _codes(diagnostics) == ["GL101", "GL201"] == sorted(f.code for f in expected)
    for finding in expected:
        got = _one(diagnostics, finding.code)
        assert got.message == finding.message
        assert got.source == "gradlint"
        assert got.code_description.href == finding.url
        assert (got.range.start.line, got.range.start.character) == (finding.line - 1, finding.column - 1)
        assert (got.range.end.line, got.range.end.character) == (finding.end_line - 1, finding.end_column - 1)
    # The project's pyproject.toml makes GL201 a warning; GL101 keeps its default.
    assert _one(diagnostics, "GL101").severity == types.DiagnosticSeverity.Error
    assert _one(diagnostics, "GL201").severity == types.DiagnosticSeverity.Warning


@pytest.mark.asyncio
async def test_a_change_republishes_for_the_new_version(client: LanguageClient, workspace: Path):
    uri = _open(client, workspace / "scatter_mean.py")
    assert _codes(await _diagnostics(client, uri, 1)) == ["GL101", "GL201"]
    _change(client, uri, 2, (workspace / "scatter_mean_clean.py").read_text())
    assert await _diagnostics(client, uri, 2) == []
    _change(client, uri, 3, (workspace / "train_loop.py").read_text())
    assert _codes(await _diagnostics(client, uri, 3)) == ["GL104"]


@pytest.mark.asyncio
async def test_stale_versions_are_never_published(client: LanguageClient, workspace: Path):
    """Forty changes sent at once, alternating a leaky and a clean text: whatever the server
    publishes is the findings of the version it names, versions only go up, and the last
    version is published."""
    leaky = (workspace / "scatter_mean.py").read_text()
    clean = (workspace / "scatter_mean_clean.py").read_text()
    uri = _open(client, workspace / "scatter_mean.py")
    await _diagnostics(client, uri, 1)
    for version in range(2, 42):
        _change(client, uri, version, leaky if version % 2 else clean)
    await _diagnostics(client, uri, 41)
    published = [p for p in client.published if p.uri == uri]
    versions = [p.version for p in published]
    assert versions == sorted(set(versions)), versions
    for params in published:
        assert _codes(params.diagnostics) == (["GL101", "GL201"] if params.version % 2 else [])
    # How many of the forty are dropped depends on the machine's load (a loaded runner linted
    # all 41 once); that a change during a lint drops it is test_a_change_during_a_lint_... below.


class _Document:
    """What the linter reads of pygls' text document; pygls changes it in place on a change."""

    def __init__(self, source: str, version: int):
        self.source, self.version, self.language_id = source, version, "python"


def test_a_change_during_a_lint_drops_that_lints_result(tmp_path: Path, monkeypatch):
    """The worker's lint of version 2 is held until version 3 has arrived: its result is never
    published, and version 3's is. Driven without a client so that which change lands during
    which lint is decided by the test, not by the machine's load (over stdio a busy CI runner
    once finished version 2's lint before version 3 was read)."""
    from gradlint import server
    from gradlint.server import DocumentLint

    linting, release = threading.Event(), threading.Event()
    linted: list[str] = []

    def lint_document(text, path, projects):
        linted.append(text)
        if text == "v2":
            linting.set()
            assert release.wait(10), "the test never released the held lint"
        return DocumentLint(text)

    monkeypatch.setattr(server, "lint_document", lint_document)
    uri = (tmp_path / "train.py").as_uri()
    document = _Document("v1", 1)

    class Workspace:
        text_documents = {uri: document}

    class Server:
        workspace = Workspace()

    published: list[tuple[int | None, str]] = []

    async def scenario():
        linter = server._Linter(Server(), types, lambda u, version, lint: published.append((version, lint.text)))
        linter.opened(uri)
        await asyncio.wait([linter.running[uri]])
        document.source, document.version = "v2", 2
        task = linter.schedule(uri)
        await asyncio.get_running_loop().run_in_executor(None, linting.wait, 10)
        document.source, document.version = "v3", 3  # arrives while version 2 is being linted
        assert linter.schedule(uri) is task  # no second lint of one document at a time
        release.set()
        await asyncio.wait([task])
        linter.stop()

    asyncio.run(scenario())
    assert published == [(1, "v1"), (3, "v3")]
    assert linted == ["v1", "v2", "v3"]


def test_opening_a_document_settles_the_heap_and_a_pause_settles_it_again(tmp_path: Path):
    """After a lint that kept many new statements (the document was opened), the lint thread runs
    a full collection and freezes what survives, so later automatic full passes skip the kept
    statements; a second without changes does the same. Driven without a client, as above."""
    import gc

    from gradlint import server

    source = (TARGETS / "train_loop.py").read_text()
    source += "".join(f"\n\ndef helper_{n}(x):\n    return x + {n}\n" for n in range(80))
    uri = (tmp_path / "train.py").as_uri()
    document = _Document(source, 1)

    class Workspace:
        text_documents = {uri: document}

    class Server:
        workspace = Workspace()

    settles: list[int] = []

    async def scenario():
        linter = server._Linter(Server(), types, lambda u, version, lint: None)
        settle = linter._settle
        linter._settle = lambda: (settle(), settles.append(gc.get_freeze_count()))
        linter.opened(uri)
        await asyncio.wait([linter.running[uri]])
        await asyncio.get_running_loop().run_in_executor(linter.pool, lambda: None)  # the settle queued after it
        assert len(settles) == 1 and settles[0] > 0 and linter.settled_chunks > 80
        document.source, document.version = source.replace("x + 3", "x + 33"), 2
        await asyncio.wait([linter.schedule(uri)])
        assert len(settles) == 1  # one statement more: no settle on the lint path
        await asyncio.sleep(1.3)
        await asyncio.get_running_loop().run_in_executor(linter.pool, lambda: None)
        assert len(settles) == 2  # the pause
        linter.stop()

    try:
        asyncio.run(scenario())
    finally:
        gc.unfreeze()


@pytest.mark.asyncio
async def test_closing_a_document_clears_its_diagnostics(client: LanguageClient, workspace: Path):
    uri = _open(client, workspace / "scatter_mean.py")
    assert await _diagnostics(client, uri, 1)
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))
    assert await _diagnostics(client, uri, None) == []


@pytest.mark.asyncio
async def test_columns_are_counted_in_the_negotiated_encoding(editor: LanguageClient, workspace: Path):
    """`étiquette = "😀 moyenne"; ctx.out = out`: the emoji is two UTF-16 units and four UTF-8
    bytes, é one unit and two bytes; the finding's code-point column is neither."""
    client, encoding = editor, editor.encoding
    path = workspace / "moyenne.py"
    (diagnostic,) = await _diagnostics(client, _open(client, path), 1)
    line = path.read_text().splitlines()[diagnostic.range.start.line]
    assert "😀" in line
    start = line.index("ctx.out")
    assert diagnostic.range.start.character == _units(line[:start], encoding)
    assert diagnostic.range.end.character == _units(line[:start + len("ctx.out")], encoding)
    assert diagnostic.range.start.character != start  # the test means something only if they differ

    # An edit on that line lands where it should: the noqa comment after the code.
    text = path.read_text()
    (noqa,) = [a for a in await _actions(client, path.as_uri(), diagnostic) if "noqa" in a.title]
    silenced = _apply(text, noqa.edit, path.as_uri(), encoding)
    assert silenced.splitlines()[diagnostic.range.start.line] == line + "  # noqa: GL101"


@pytest.mark.asyncio
async def test_the_safe_fix_is_preferred_and_applying_it_clears_the_finding(editor: LanguageClient, workspace: Path):
    client = editor
    path = workspace / "scatter_mean.py"
    text = path.read_text()
    uri = _open(client, path)
    diagnostic = _one(await _diagnostics(client, uri, 1), "GL101")
    actions = await _actions(client, uri, diagnostic)
    (fix,) = [a for a in actions if a.is_preferred]
    assert fix.kind == types.CodeActionKind.QuickFix
    assert "unsafe" not in fix.title and "GL101" in fix.title
    assert fix.diagnostics[0].code == "GL101"
    if client.encoding == "utf-16":  # VS Code: a versioned edit, which it drops if the text moved on
        assert fix.edit.document_changes[0].text_document.version == 1
    else:  # Neovim 0.11 takes no documentChanges
        assert fix.edit.changes and not fix.edit.document_changes

    fixed = _apply(text, fix.edit, uri, client.encoding)
    assert "ctx.save_for_backward(index, out)" in fixed and "ctx.out = out" not in fixed
    _change(client, uri, 2, fixed)
    assert _codes(await _diagnostics(client, uri, 2)) == ["GL201"]


@pytest.mark.asyncio
async def test_the_unsafe_fix_is_titled_unsafe_and_not_preferred(editor: LanguageClient, workspace: Path):
    path = workspace / "train_loop.py"
    text = path.read_text()
    uri = _open(editor, path)
    diagnostic = _one(await _diagnostics(editor, uri, 1), "GL104")
    actions = await _actions(editor, uri, diagnostic)
    (fix,) = [a for a in actions if "noqa" not in a.title]
    assert "unsafe" in fix.title and not fix.is_preferred
    fixed = _apply(text, fix.edit, uri, editor.encoding)
    assert "total_loss += loss.detach()" in fixed
    _change(editor, uri, 2, fixed)
    assert await _diagnostics(editor, uri, 2) == []


@pytest.mark.asyncio
async def test_the_noqa_action_silences_the_finding(client: LanguageClient, workspace: Path):
    path = workspace / "train_loop.py"
    text = path.read_text()
    uri = _open(client, path)
    diagnostic = _one(await _diagnostics(client, uri, 1), "GL104")
    (noqa,) = [a for a in await _actions(client, uri, diagnostic) if "noqa" in a.title]
    silenced = _apply(text, noqa.edit, uri, "utf-16")
    assert "        total_loss += loss  # noqa: GL104\n" in silenced
    assert len(silenced.splitlines()) == len(text.splitlines())
    _change(client, uri, 2, silenced)
    assert await _diagnostics(client, uri, 2) == []


@pytest.mark.asyncio
async def test_the_noqa_action_joins_a_noqa_comment_already_there(client: LanguageClient, workspace: Path):
    path = workspace / "train_loop_noqa.py"
    text = path.read_text()
    uri = _open(client, path)
    diagnostic = _one(await _diagnostics(client, uri, 1), "GL104")
    (noqa,) = [a for a in await _actions(client, uri, diagnostic) if "noqa" in a.title]
    silenced = _apply(text, noqa.edit, uri, "utf-16")
    assert "total_loss += loss  # noqa: E501, GL104 (kept long on purpose)\n" in silenced
    _change(client, uri, 2, silenced)
    assert await _diagnostics(client, uri, 2) == []


@pytest.mark.asyncio
async def test_hover_on_a_finding_shows_its_rule_doc(client: LanguageClient, workspace: Path):
    uri = _open(client, workspace / "scatter_mean.py")
    diagnostic = _one(await _diagnostics(client, uri, 1), "GL101")
    inside = types.Position(diagnostic.range.start.line, diagnostic.range.start.character + 2)
    hover = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri), inside))
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert hover.contents.value.startswith(f"**GL101** `ctx-tensor-attribute`: {diagnostic.message}")
    assert rule_by_code("GL101").doc.strip() in hover.contents.value
    assert hover.range == diagnostic.range

    elsewhere = types.Position(0, 0)  # `import torch`
    assert await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri), elsewhere)) is None


@pytest.mark.asyncio
async def test_an_excluded_file_gets_no_diagnostics(client: LanguageClient, workspace: Path):
    (workspace / "generated").mkdir()
    excluded = Path(shutil.copy(workspace / "scatter_mean.py", workspace / "generated" / "op.py"))
    assert await _diagnostics(client, _open(client, excluded), 1) == []


@pytest.mark.asyncio
async def test_per_file_ignores_apply(client: LanguageClient, workspace: Path):
    legacy = Path(shutil.copy(workspace / "scatter_mean.py", workspace / "legacy_op.py"))
    assert _codes(await _diagnostics(client, _open(client, legacy), 1)) == ["GL201"]


@pytest.mark.asyncio
async def test_a_syntax_error_is_a_gl000_diagnostic_and_the_server_goes_on(client: LanguageClient, workspace: Path):
    path = workspace / "broken.py"
    (diagnostic,) = await _diagnostics(client, _open(client, path), 1)
    assert diagnostic.code == "GL000" and "never closed" in diagnostic.message
    assert diagnostic.range.start == types.Position(5, 15)  # the `(` of `def forward(ctx, x:`
    assert path.read_text().splitlines()[5][15] == "("
    assert _codes(await _diagnostics(client, _open(client, workspace / "train_loop.py"), 1)) == ["GL104"]


@pytest.mark.asyncio
async def test_a_byte_order_mark_counts_as_a_character_of_the_first_line(client: LanguageClient, workspace: Path):
    """gradlint reads a file without its BOM; an editor that keeps it in the text counts it."""
    path = workspace / "bom.py"
    uri = _open(client, path, "\ufeffx = (\n")
    (diagnostic,) = await _diagnostics(client, uri, 1)
    assert diagnostic.code == "GL000"
    assert diagnostic.range.start == types.Position(0, 5)  # the `(`, after the mark and `x = `


async def _republished(client: LanguageClient, uri: str, after: int, timeout: float = 60) -> list:
    """Every publish for `uri` after the first `after` publishes, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in client.published[after:] if p.uri == uri]
        if found:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"nothing republished for {uri}")


@pytest.mark.asyncio
async def test_saving_a_changed_configuration_rechecks_the_open_documents(client: LanguageClient, workspace: Path):
    uri = _open(client, workspace / "scatter_mean.py")
    assert _codes(await _diagnostics(client, uri, 1)) == ["GL101", "GL201"]
    (workspace / "pyproject.toml").write_text(PYPROJECT + 'ignore = ["GL201"]\n')
    before = len(client.published)
    client.text_document_did_save(types.DidSaveTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=(workspace / "pyproject.toml").as_uri())))
    (republished,) = await _republished(client, uri, before)
    assert republished.version == 1 and _codes(republished.diagnostics) == ["GL101"]


@pytest.mark.asyncio
async def test_a_new_config_file_is_seen_through_the_watchers_the_server_registers(client: LanguageClient,
                                                                                     workspace: Path):
    deadline = time.monotonic() + 60  # the server registers them after `initialized`, as a request of its own
    while not client.registrations and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    (registration,) = client.registrations
    assert registration.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES
    # registerOptions is `any` in the protocol: the client gets it as plain JSON.
    assert sorted(w["globPattern"] for w in registration.register_options["watchers"]) == ["**/.gitignore",
                                                                                          "**/pyproject.toml"]
    (workspace / "sub").mkdir()
    path = Path(shutil.copy(workspace / "scatter_mean.py", workspace / "sub" / "op.py"))
    uri = _open(client, path)
    assert _codes(await _diagnostics(client, uri, 1)) == ["GL101", "GL201"]
    config = workspace / "sub" / "pyproject.toml"  # nearer than the project's: it governs sub/
    config.write_text('[tool.gradlint]\nselect = ["GL2"]\n')
    before = len(client.published)
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
        changes=[types.FileEvent(uri=config.as_uri(), type=types.FileChangeType.Created)]))
    (republished,) = await _republished(client, uri, before)
    assert _codes(republished.diagnostics) == ["GL201"]


@pytest.mark.asyncio
async def test_saving_a_document_republishes_its_diagnostics(client: LanguageClient, workspace: Path):
    path = workspace / "train_loop.py"
    uri = _open(client, path)
    assert _codes(await _diagnostics(client, uri, 1)) == ["GL104"]
    before = len(client.published)
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    (republished,) = await _republished(client, uri, before)
    assert republished.version == 1 and _codes(republished.diagnostics) == ["GL104"]


@pytest.mark.asyncio
async def test_a_bad_configuration_is_shown_once_and_gives_no_diagnostics(client: LanguageClient, workspace: Path):
    (workspace / "pyproject.toml").write_text("[tool.gradlint]\nselect = 5\n")
    uri = _open(client, workspace / "scatter_mean.py")
    assert await _diagnostics(client, uri, 1) == []
    assert await _diagnostics(client, _open(client, workspace / "train_loop.py"), 1) == []
    errors = [m for m in client.messages if m.type == types.MessageType.Error]
    assert len(errors) == 1
    assert "pyproject.toml: [tool.gradlint]: select must be a list of strings, got integer 5" in errors[0].message


@pytest.mark.asyncio
async def test_shutdown_then_exit_ends_the_server_with_status_0(client: LanguageClient, workspace: Path):
    uri = _open(client, workspace / "scatter_mean.py")
    await _diagnostics(client, uri, 1)
    await client.shutdown_session()  # shutdown, exit, and wait for the process
    assert client._server.returncode == 0


def test_without_pygls_the_command_names_the_extra_and_exits_2():
    # None in sys.modules makes `import pygls` fail as it does when pygls is not installed.
    code = "import sys; sys.modules['pygls'] = None; from gradlint.server import server; server()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("gradlint: error: the language server needs pygls")
    assert re.search(r"pip install '[A-Za-z0-9_.-]+\[lsp\]'$", line), line


@pytest.mark.asyncio
async def test_the_project_index_reaches_diagnostics_and_follows_edits_on_disk(client: LanguageClient, workspace: Path):
    """A finding that rests on another module of the project (a meter class in utils/) is found
    in the editor too; when that module is fixed on disk, the next lint of the document drops it."""
    shutil.copytree(Path(__file__).parent / "fixtures" / "projects" / "meters" / "app", workspace / "app")
    train = workspace / "app" / "train.py"
    uri = _open(client, train)
    found = await _diagnostics(client, uri, 1)
    meter = [d for d in found if "meter.update()" in d.message]
    assert len(meter) == 1 and meter[0].code == "GL104", [d.message for d in found]
    assert "(utils/meters.py:11)" in meter[0].message
    meters = workspace / "app" / "utils" / "meters.py"
    meters.write_text(meters.read_text().replace("self.sum += value * n", "self.sum += float(value) * n"))
    _change(client, uri, 2, train.read_text() + "\n")
    assert not [d for d in await _diagnostics(client, uri, 2) if "meter.update()" in d.message]
