"""`gradlint server`: the checks in the editor, over the Language Server Protocol on stdio.

What the editor gets:
- diagnostics for each open Python document, on open, on every change and on save, with the
  project's configuration found as `gradlint check` finds it (the nearest pyproject.toml with a
  [tool.gradlint] table above the file): excluded files get none, per-file-ignores apply;
- code actions: a finding's safe fix (preferred), its unsafe fix (titled as such), and
  `# noqa: GLxxx` on its line (merged into a `# noqa:` comment already there);
- hover on a flagged range: the finding and its rule's documentation.

Choices, and why:
- Push diagnostics (textDocument/publishDiagnostics), not pull: every client supports them
  (Neovim before 0.10 and many smaller clients have no pull diagnostics), and each carries the
  document version it was computed for, so a client can drop what is stale.
- Full document sync: the client sends the whole text on each change. pygls applies incremental
  changes on `str.splitlines` lines, which also break at \\f, \\v, \\x1c-\\x1e, \\x85, \\u2028 and
  \\u2029, where LSP (and Python) break only at \\n, \\r\\n and \\r: one such character in a
  string or comment put every later edit in the wrong place (seen with pygls 2.1). A
  1,000-line file is 40 KB a change, which is nothing on a pipe.
- Linting runs on one worker thread, newest version first: a change while a lint runs makes
  that lint's result stale; it is dropped, never published, and the next lint takes the newest
  text. No debounce timer: the first keystroke is linted at once and the ones typed meanwhile
  collapse into one lint. The server loop stays free to read messages and answer requests.
- Positions: findings count lines from 1 and columns in code points from 1; LSP counts both
  from 0 and columns in the code units of the negotiated encoding (UTF-16 unless the client
  offers UTF-8 or UTF-32), so a character outside the BMP (an emoji) is two columns in UTF-16.
  Lines break where Python breaks them (\\n, \\r\\n, \\r), which is LSP's rule too.

pygls and lsprotocol come with the `lsp` extra; nothing here imports them until the server
starts, so `gradlint check` never needs them.
"""

from __future__ import annotations

import asyncio
import gc
import io
import os
import re
import sys
import tokenize
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence
from urllib.parse import unquote, urlparse

import click

from gradlint import __version__, parse, usage_errors
from gradlint.config import ConfigError, Settings, find_config, load_settings
from gradlint.discover import PYTHON_SUFFIXES, Discovery
from gradlint.engine import UNUSED_NOQA, RuleSet, lint_bytes, selectable_codes
from gradlint.findings import Applicability, Edit, Finding, Severity
from gradlint.fixes import SourceLines
from gradlint.registry import all_rules, rule_by_code
from gradlint.reporters import valid_unicode

# The distribution's name on the package index, for the install hint when the extra is missing;
# the installed metadata says it where it can (`gradlint` on PyPI is an unrelated tool).
DISTRIBUTION = "torch-gradlint"
EXTRA = "lsp"
SOURCE = "gradlint"  # Diagnostic.source: what the editor shows beside each message
SETTINGS_FILES = ("pyproject.toml", ".gitignore")  # a change to one may change any document's settings
_BOM = "\ufeff"


# ----- a document's findings, without the protocol ---------------------------------------

@dataclass(frozen=True)
class DocumentLint:
    """What linting one document's text gave. `findings` are in the coordinates of the text
    after a leading byte-order mark (gradlint reads a file without it); `bom` says whether the
    document has one, so positions in the document shift by one on its first line."""

    text: str  # the document's text, as the client sent it
    findings: tuple[Finding, ...] = ()
    bom: bool = False
    excluded: bool = False  # the project's exclude settings or .gitignore drop this file
    config_error: str | None = None  # the configuration could not be read: no findings
    internal_error: str | None = None  # a bug of gradlint's, while checking this document


@dataclass(frozen=True)
class _Project:
    settings: Settings
    ruleset: RuleSet
    discovery: Discovery
    codes: tuple[str, ...]


class Projects:
    """The settings of each project a document belongs to, read as `gradlint check` reads them,
    and kept while the config file is unchanged (its size and mtime are looked at on each lint;
    `forget` drops everything, which the server does on every save)."""

    def __init__(self, default_root: Path):
        self.default_root = default_root  # where a document with no file (untitled) looks
        self._config_of: dict[Path, Path | None] = {}  # folder -> its nearest config
        self._loaded: dict[Path | None, tuple[tuple[int, int] | None, _Project]] = {}

    def forget(self) -> None:
        self._config_of.clear()
        self._loaded.clear()

    def for_path(self, path: Path | None) -> _Project:
        """ConfigError for a configuration `gradlint check` would refuse (exit 2)."""
        folder = path.parent if path is not None else self.default_root
        if folder not in self._config_of:
            # find_config reads every pyproject.toml on the way up: once per folder, not per keystroke.
            self._config_of[folder] = find_config(path if path is not None else self.default_root)
        config = self._config_of[folder]
        stamp = _stamp(config)
        kept = self._loaded.get(config)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        settings = load_settings(config, root=self.default_root)
        codes = selectable_codes()
        settings.check_selectors(codes)
        project = _Project(settings, RuleSet.from_settings(settings), Discovery(settings), codes)
        self._loaded[config] = (stamp, project)
        return project


def _stamp(config: Path | None) -> tuple[int, int] | None:
    if config is None:
        return None
    try:
        info = config.stat()
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def lint_document(text: str, path: Path | None, projects: Projects) -> DocumentLint:
    """Lint one document's text as `gradlint check` would lint the file at `path` holding it
    (None: a document with no file yet). The one place the server lints. The engine's project
    index reads the modules the document imports from disk, and reads again those edited since
    (Project.refresh): other open documents count as saved."""
    try:
        project = projects.for_path(path)
    except ConfigError as error:
        return DocumentLint(text, config_error=str(error))
    ruleset = project.ruleset
    if path is not None:
        seen = _as_settings_see(path, project.settings.root)
        if project.discovery.excluded(seen, False):
            return DocumentLint(text, excluded=True)
        ruleset = ruleset.without(project.settings.ignored_for(project.discovery.relative(seen), project.codes))
    # Through bytes, as the CLI reads stdin: the same max-file-size and NUL-byte checks (GL001).
    # "surrogatepass": a lone surrogate (JSON allows the escape) becomes invalid UTF-8, a GL001.
    data = text.encode("utf-8", "surrogatepass")
    name = str(path) if path is not None else "<untitled>"
    result = lint_bytes(data, name, ruleset, project.settings.max_file_size)
    return DocumentLint(text, tuple(result.findings), bom=text.startswith(_BOM),
                        internal_error=result.internal_error)


def _as_settings_see(path: Path, root: Path) -> Path:
    """The path that excludes and per-file-ignores match against the (resolved) project root:
    an editor may name the file through a symlinked folder (macOS's /tmp is /private/tmp)."""
    absolute = Path(os.path.abspath(path))
    for candidate in (absolute, Path(os.path.realpath(absolute))):
        try:
            candidate.relative_to(root)
        except ValueError:
            continue
        return candidate
    return absolute


class Positions:
    """Between gradlint's places in a document (1-based lines, 1-based columns in code points)
    and LSP's (0-based lines, 0-based columns in code units of `encoding`)."""

    def __init__(self, lint: DocumentLint, encoding: str):
        self.lines = SourceLines(lint.text)
        self.shift = 1 if lint.bom else 0  # the mark is a character of the document, not of the findings
        self.encoding = encoding

    def _units(self, text: str) -> int:
        if self.encoding == "utf-8":
            return len(text.encode("utf-8", "surrogatepass"))
        if self.encoding == "utf-32":
            return len(text)
        return len(text.encode("utf-16-le", "surrogatepass")) // 2

    def position(self, line: int, column: int) -> tuple[int, int]:
        """(line, character) for a finding's 1-based line and column; past the end of the text
        (a syntax error at the end of the file) is clamped to the text's end."""
        count = len(self.lines.starts)
        if line > count:
            line, column = count, 1 << 62
        line = max(line, 1)
        start = self.lines.starts[line - 1]
        end = self.lines.line_end(line)
        text = self.lines.source[start:end].rstrip("\r\n")
        index = column - 1 + (self.shift if line == 1 else 0)
        return line - 1, self._units(text[:max(index, 0)])

    def finding_range(self, finding: Finding) -> tuple[tuple[int, int], tuple[int, int]]:
        start = self.position(finding.line, finding.column)
        if finding.end_line <= 0:  # a finding with no extent: a point
            return start, start
        return start, max(start, self.position(finding.end_line, finding.end_column))

    def edit_range(self, edit: Edit) -> tuple[tuple[int, int], tuple[int, int]]:
        """An edit's offsets are into the text the findings are in (after a byte-order mark)."""
        start = self.lines.position(edit.start + self.shift)
        end = self.lines.position(edit.end + self.shift)
        return self._at(start), self._at(end)

    def _at(self, place: tuple[int, int]) -> tuple[int, int]:
        line, column = place
        start = self.lines.starts[line - 1]
        return line - 1, self._units(self.lines.source[start:start + column - 1])


# A noqa comment, bare or with its list of codes (`A1, B2`), as gradlint/suppressions.py reads it.
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?", re.IGNORECASE)


def noqa_edit(source: str, finding: Finding) -> Edit | None:
    """The edit that silences `finding` with a `# noqa: CODE` comment on its first line (or its
    last, when the first ends inside a string or with a backslash): the code joins a `# noqa:`
    list already on the line, or the comment goes after the line's code (and after a comment
    already there). None when no line can take one, or for a finding a comment cannot silence
    (GL000, GL001: the engine reports them before it reads comments). `source` is the text the
    finding is in."""
    if rule_by_code(finding.code) is None:
        return None
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):  # newer syntax than this Python's tokenizer reads
        return None
    lines = SourceLines(source)
    for line in dict.fromkeys((finding.line, finding.end_line or finding.line)):
        # A line a comment can end: the tokenizer ends it with NEWLINE or NL. A line inside a
        # string, or one continued by a backslash, has neither.
        if not any(t.type in (tokenize.NEWLINE, tokenize.NL) and t.start[0] == line for t in tokens):
            continue
        line_start = lines.starts[line - 1]
        comment = next((t for t in tokens if t.type == tokenize.COMMENT and t.start[0] == line), None)
        if comment is not None:
            match = _NOQA.search(comment.string)
            if match is not None:
                if match.group("codes") is None:
                    return None  # a bare noqa already silences every code on the line
                at = line_start + comment.start[1] + match.end("codes")
                return lines.edit(at, at, f", {finding.code}")
            at = line_start + comment.end[1]
        else:
            text = source[line_start:lines.line_end(line)].rstrip("\r\n")
            at = line_start + len(text.rstrip(" \t\f"))
            # Trailing whitespace goes: the comment replaces it.
            return lines.edit(at, line_start + len(text), f"  # noqa: {finding.code}")
        return lines.edit(at, at, f"  # noqa: {finding.code}")
    return None


def hover_text(findings: Iterable[Finding]) -> str:
    """Markdown: each finding's code, name and message, then its rule's documentation."""
    parts = []
    for finding in findings:
        rule = rule_by_code(finding.code)
        head = f"**{finding.code}** `{finding.name}`: {finding.message}" if finding.name \
            else f"**{finding.code}**: {finding.message}"
        parts.append(head if rule is None else f"{head}\n\n{rule.doc.strip()}")
    return valid_unicode("\n\n---\n\n".join(parts))


def document_path(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    if os.name == "nt" and re.match(r"^/[A-Za-z]:", path):
        path = path[1:]
    return Path(path)


def is_python(uri: str, language_id: str | None) -> bool:
    if language_id:
        return language_id == "python"
    path = document_path(uri)
    return path is not None and path.suffix in PYTHON_SUFFIXES


# ----- the protocol -----------------------------------------------------------------------

class MissingExtra(Exception):
    """pygls or lsprotocol is not installed."""


def create_server():
    """The language server, ready for `start_io()`. MissingExtra without pygls/lsprotocol."""
    try:
        from lsprotocol import types
        from pygls.lsp.server import LanguageServer
    except ImportError as error:
        if (error.name or "").split(".")[0] in ("pygls", "lsprotocol", "cattrs", "attrs"):
            raise MissingExtra(error.name) from None
        raise

    server = LanguageServer("gradlint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)

    severities = {Severity.ERROR: types.DiagnosticSeverity.Error, Severity.WARNING: types.DiagnosticSeverity.Warning,
                 Severity.NOTE: types.DiagnosticSeverity.Information}

    def to_range(where: tuple[tuple[int, int], tuple[int, int]]):
        (line, character), (end_line, end_character) = where
        return types.Range(types.Position(line, character), types.Position(end_line, end_character))

    def diagnostic(finding: Finding, positions: Positions):
        url = getattr(finding, "url", None)
        return types.Diagnostic(
            range=to_range(positions.finding_range(finding)),
            message=valid_unicode(finding.message),
            severity=severities.get(finding.severity, types.DiagnosticSeverity.Error),
            code=finding.code,
            code_description=types.CodeDescription(href=url) if url else None,
            source=SOURCE,
            # An unused noqa is dead text: editors fade it, as they do ruff's RUF100.
            tags=[types.DiagnosticTag.Unnecessary] if finding.code == UNUSED_NOQA[0] else None,
        )

    def publish(uri: str, version: int | None, lint: DocumentLint | None) -> None:
        diagnostics = []
        if lint is not None:
            positions = Positions(lint, server.workspace.position_encoding or "utf-16")
            diagnostics = [diagnostic(f, positions) for f in lint.findings]
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version))

    linter = _Linter(server, types, publish)

    @server.feature(types.INITIALIZE)
    def initialize(ls, params: types.InitializeParams) -> None:
        folders = params.workspace_folders or []
        root = document_path(folders[0].uri) if folders else \
            (document_path(params.root_uri) if params.root_uri else None) or \
            (Path(params.root_path) if params.root_path else None)
        linter.projects.default_root = (root or Path.cwd()).resolve()

    @server.feature(types.INITIALIZED)
    async def initialized(ls, params) -> None:
        linter.warm_up()
        # An edit to the config a document uses is seen on its next lint (its mtime is checked);
        # a new pyproject.toml or a changed .gitignore is seen through these watchers.
        if _capability(ls, "workspace", "did_change_watched_files", "dynamic_registration"):
            watchers = [types.FileSystemWatcher(glob_pattern=f"**/{name}") for name in SETTINGS_FILES]
            try:
                await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
                    id="gradlint-settings-files", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                    register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers))]))
            except Exception as error:  # noqa: BLE001 - a client that refuses: saves still re-read the settings
                ls.window_log_message(types.LogMessageParams(
                    type=types.MessageType.Warning, message=f"gradlint: cannot watch the settings files: {error}"))

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched_files_changed(ls, params: types.DidChangeWatchedFilesParams) -> None:
        linter.projects.forget()
        linter.relint_all()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: types.DidOpenTextDocumentParams) -> None:
        linter.opened(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls, params: types.DidChangeTextDocumentParams) -> None:
        linter.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def did_save(ls, params: types.DidSaveTextDocumentParams) -> None:
        linter.projects.forget()
        path = document_path(params.text_document.uri)
        if path is not None and path.name in SETTINGS_FILES:  # every open document's settings may differ now
            linter.relint_all()
        else:
            linter.relint(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls, params: types.DidCloseTextDocumentParams) -> None:
        linter.closed(params.text_document.uri)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls, params) -> None:
        linter.stop()

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls, params: types.HoverParams):
        current = await linter.current(params.text_document.uri)
        if current is None:
            return None
        _, lint = current
        positions = Positions(lint, server.workspace.position_encoding or "utf-16")
        at = (params.position.line, params.position.character)
        hits = []
        for finding in lint.findings:
            start, end = positions.finding_range(finding)
            if start <= at < end or at == start:
                hits.append((finding, start, end))
        if not hits:
            return None
        formats = _capability(ls, "text_document", "hover", "content_format") or []
        kind = types.MarkupKind.Markdown if not formats or types.MarkupKind.Markdown in formats \
            else types.MarkupKind.PlainText
        start = min(h[1] for h in hits)
        end = max(h[2] for h in hits)
        return types.Hover(contents=types.MarkupContent(kind=kind, value=hover_text(h[0] for h in hits)),
                           range=to_range((start, end)))

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
    async def code_action(ls, params: types.CodeActionParams):
        uri = params.text_document.uri
        only = params.context.only
        if only and not any(types.CodeActionKind.QuickFix.value.startswith(k) for k in only):
            return None
        current = await linter.current(uri)
        if current is None:
            return None
        version, lint = current
        positions = Positions(lint, server.workspace.position_encoding or "utf-16")
        wanted = ((params.range.start.line, params.range.start.character),
                  (params.range.end.line, params.range.end.character))
        source = lint.text[1:] if lint.bom else lint.text
        versioned = bool(_capability(ls, "workspace", "workspace_edit", "document_changes"))

        def workspace_edit(edits: Sequence[Edit]):
            text_edits = [types.TextEdit(range=to_range(positions.edit_range(e)), new_text=e.content) for e in edits]
            if versioned:  # the client refuses the edit if the document has changed since
                return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                    edits=text_edits)])
            return types.WorkspaceEdit(changes={uri: text_edits})

        actions = []
        for finding in lint.findings:
            start, end = positions.finding_range(finding)
            if not (start <= wanted[1] and wanted[0] <= end):
                continue
            diagnostics = [diagnostic(finding, positions)]
            fix = finding.fix
            if fix is not None:
                safe = fix.applicability is Applicability.SAFE
                title = f"{fix.message} ({finding.code})" if safe else f"{fix.message} ({finding.code}, unsafe fix)"
                actions.append(types.CodeAction(
                    title=valid_unicode(title), kind=types.CodeActionKind.QuickFix, diagnostics=diagnostics,
                    is_preferred=safe, edit=workspace_edit(fix.edits)))
            silence = noqa_edit(source, finding)
            if silence is not None:
                actions.append(types.CodeAction(
                    title=f"Add `# noqa: {finding.code}` on this line", kind=types.CodeActionKind.QuickFix,
                    diagnostics=diagnostics, edit=workspace_edit([silence])))
        return actions

    return server


def _capability(ls, *names: str):
    """A client capability by its path (None where the client said nothing)."""
    value = ls.client_capabilities
    for name in names:
        value = getattr(value, name, None)
        if value is None:
            return None
    return value


_WARM_UP = b"""import torch


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x
"""


@dataclass(frozen=True)
class _Linted:
    key: tuple[int | None, int]  # (document version, settings generation)
    lint: DocumentLint


class _Linter:
    """Lints open documents on one worker thread and publishes each result, unless the document
    has changed meanwhile. State is touched on the event loop only (the handlers run there): the
    worker thread sees a document's text and path and nothing else."""

    def __init__(self, server, types, publish: Callable[[str, int | None, DocumentLint | None], None]):
        self.server = server
        self.types = types
        self.publish = publish
        self.projects = Projects(Path.cwd().resolve())
        # Every change lints the document again, and a change touches one statement: the others
        # are parsed and worked out from memory (gradlint/parse.py).
        parse.keep(parse.EDITOR_KEPT_TEXT)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradlint-lint")
        self.settled_chunks = 0  # statements kept when the heap was last settled (see _settle)
        self.idle: asyncio.TimerHandle | None = None
        self.generation = 0  # bumped when the settings may have changed: every result is stale
        self.open: set[str] = set()  # the URIs as the client wrote them (pygls keeps them unquoted)
        self.results: dict[str, _Linted] = {}
        self.running: dict[str, asyncio.Task] = {}
        self.reported: set[str] = set()  # messages already shown, shown once

    def _document(self, uri: str):
        document = self.server.workspace.text_documents.get(unquote(uri))
        if document is None or not is_python(uri, document.language_id):
            return None
        return document

    def warm_up(self) -> None:
        """Import the rules on the worker thread before the first document arrives: the first
        lint would otherwise pay for it (the rule modules, libcst's parser)."""
        self.pool.submit(lambda: lint_bytes(_WARM_UP, "<warm-up>", RuleSet(all_rules(), {}), len(_WARM_UP)))

    def opened(self, uri: str) -> None:
        self.open.add(uri)
        self.results.pop(uri, None)
        self.schedule(uri)

    def closed(self, uri: str) -> None:
        self.open.discard(uri)
        self.results.pop(uri, None)
        task = self.running.pop(uri, None)
        if task is not None:
            task.cancel()
        self.publish(uri, None, None)  # a closed file's findings leave the problems list

    def relint(self, uri: str) -> None:
        self.results.pop(uri, None)
        self.schedule(uri)

    def relint_all(self) -> None:
        self.generation += 1
        for uri in sorted(self.open):
            self.schedule(uri)

    def stop(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        for task in self.running.values():
            task.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def schedule(self, uri: str) -> asyncio.Task | None:
        """Lint the document's newest text, unless a lint of it is under way: that one lints again
        when it finds it was stale."""
        task = self.running.get(uri)
        if task is None and self._document(uri) is not None:
            task = self.running[uri] = asyncio.ensure_future(self._run(uri))
        return task

    async def current(self, uri: str) -> tuple[int | None, DocumentLint] | None:
        """The result for the document as it is now, waiting for its lint if needed."""
        while True:
            document = self._document(uri)
            if document is None:
                return None
            done = self.results.get(uri)
            if done is not None and done.key == (document.version, self.generation):
                return document.version, done.lint
            task = self.schedule(uri)
            if task is None:
                return None
            # wait(): a request the client cancels does not cancel the lint others wait for, and a
            # lint cancelled by a close ends the loop above (the document is gone) rather than the request.
            await asyncio.wait([task])

    async def _run(self, uri: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                document = self._document(uri)
                if document is None:
                    return
                # pygls changes the document object in place: its version and text are read now.
                key = (document.version, self.generation)
                done = self.results.get(uri)
                if done is not None and done.key == key:
                    return
                text, path = document.source, document_path(uri)
                try:
                    lint = await loop.run_in_executor(self.pool, lint_document, text, path, self.projects)
                except RuntimeError:  # the pool is shut down: the server is stopping
                    return
                except Exception as error:  # noqa: BLE001 - a bug of ours: say so, keep serving
                    lint = DocumentLint(text, internal_error=f"{type(error).__name__}: {error}")
                now = self._document(uri)
                if now is None:
                    return
                if (now.version, self.generation) != key:
                    continue  # stale: never published; lint the newest text
                self.results[uri] = _Linted(key, lint)
                self._tell(uri, lint)
                self.publish(uri, key[0], lint)
                self._after_lint(loop)
                return
        finally:
            if self.running.get(uri) is asyncio.current_task():
                del self.running[uri]

    def _after_lint(self, loop: asyncio.AbstractEventLoop) -> None:
        """Settle the heap once many statements are newly kept (a document opened or pasted in),
        and otherwise when no change has come for a second."""
        if parse.kept_chunks() > self.settled_chunks * 5 // 4 + 64:
            self._submit_settle()
        if self.idle is not None:
            self.idle.cancel()
        self.idle = loop.call_later(1.0, lambda: None if self.running else self._submit_settle())

    def _submit_settle(self) -> None:
        try:
            self.pool.submit(self._settle)
        except RuntimeError:  # the pool is shut down: the server is stopping
            pass

    def _settle(self) -> None:
        """On the lint thread, between lints: a full collection, then what survives it frozen
        (gc.freeze), so the collector's automatic full passes leave the kept statements alone.
        Without this, every fifth lint of the LSP bench's script took a full pass over them:
        55-80 ms more than the 40 ms of the lint (gc.callbacks, this VM); frozen, 4-9 ms. A frozen
        object that dies is still freed by its reference count; one that dies in a cycle waits
        for the next settle, which unfreezes everything first."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.settled_chunks = parse.kept_chunks()

    def _tell(self, uri: str, lint: DocumentLint) -> None:
        """A configuration or internal error, shown once: the document then has no findings."""
        types = self.types
        if lint.config_error is not None:
            message, kind = f"gradlint: {lint.config_error}", types.MessageType.Error
        elif lint.internal_error is not None:
            message = f"gradlint: internal error while checking {uri}: {lint.internal_error} (please report it)"
            kind = types.MessageType.Error
        else:
            return
        self.server.window_log_message(types.LogMessageParams(type=kind, message=valid_unicode(message)))
        if message not in self.reported:
            self.reported.add(message)
            self.server.window_show_message(types.ShowMessageParams(type=kind, message=valid_unicode(message)))


# ----- the command ------------------------------------------------------------------------

def _distribution() -> str:
    from importlib import metadata

    try:
        names = metadata.packages_distributions().get("gradlint") or []
    except Exception:  # noqa: BLE001 - only for a hint: broken metadata elsewhere must not hide it
        names = []
    return next((n for n in names if n != "gradlint"), DISTRIBUTION)


@click.command("server", cls=usage_errors.Command, context_settings={"help_option_names": ["-h", "--help"]})
def server() -> None:
    """Run the language server (LSP over stdio) for an editor: diagnostics, fixes, rule docs."""
    try:
        language_server = create_server()
    except MissingExtra as missing:
        click.echo(f"gradlint: error: the language server needs {missing} (the `{EXTRA}` extra): "
                   f"pip install '{_distribution()}[{EXTRA}]'", err=True)
        sys.exit(2)
    language_server.start_io()


if __name__ == "__main__":
    server()
