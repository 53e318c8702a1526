"""libcst's parse of a file, one top-level statement at a time, each kept for the next parse.

An editor lints a file again at every change, and a change touches one statement: libcst's parse
was 81-121 ms of a 214-272 ms lint of the LSP bench's 1,000-line script (measured on this VM), and
a statement parsed before is reused as it is, since libcst's nodes are immutable. What the rest of
the lint works out from a statement's nodes alone (the positions of its nodes, a def's prescan) is
then kept with the statement too (`memo`). Only the language server keeps statements (`keep`): a
run over many files parses each once (166,152 of the 183,222 statement lines parsed in a run over
torch's sources are distinct), so it parses each file whole and keeps nothing.

The statements come from CPython's tree, which the engine already has: a chunk is a top-level
statement with the blank and comment lines before it (statements sharing a line, `a; b`, are one
chunk). The module is put together from the chunks' statements; it writes back exactly the source
(checked on every file of ours and of the real-world corpus by the tests, and on the 2,136 of
torch's 2,285 files that are put together, by hand) because each chunk writes back
its own text and the chunks agree on what libcst's module keeps for the whole file: the newline and
the indentation that a block written with `indent=None` uses. Where they do not (a file indented
with tabs in one def and spaces in another, mixed line endings), or anything else is out of the
ordinary (a byte-order mark, a chunk libcst reads differently alone), the file is parsed whole.
"""

from __future__ import annotations

import ast
import threading
from collections import OrderedDict
from typing import Callable, TypeVar

import libcst as cst

from gradlint.source import split_lines

# Chunks kept, by the length of their text (0: none, and files are parsed whole). libcst's nodes
# take about 55 bytes of memory per byte of source (tracemalloc, the LSP bench's script), so 1 MB
# of text is about 55 MB of trees: the files an editor has open and the project modules they
# import. A run over many files keeps none: each file is parsed once, and a heap of kept trees made
# every full collection of Python's cyclic collector slower (a run over the real-world corpus'
# 12,190 files took 8-12% longer with 1 MB kept, measured alternately).
_max_kept_text = 0
EDITOR_KEPT_TEXT = 1_000_000


def keep(max_text: int) -> None:
    """Keep up to `max_text` characters of parsed statements for the next parses (the language
    server: the same file again at every change), or none (0)."""
    global _max_kept_text
    _max_kept_text = max_text
    if not max_text:
        forget()


# libcst validates every node it makes (`CSTNode.__post_init__`: whitespace regexes, parentheses),
# also each node its own parser makes from text, which are valid by construction; libcst's own
# comment there says validation would better be skipped when parsing. It was 13-17% of parse time
# on 157 of torch's files (measured: 2.32 s validated, 1.92 s not). Skipped only inside `parse`, on
# the thread parsing: a node built anywhere else (a fix's new code) is validated as before.
_parsing = threading.local()
_validate_node = cst.CSTNode.__post_init__


def _post_init(node: cst.CSTNode) -> None:
    if not getattr(_parsing, "active", False):
        _validate_node(node)


cst.CSTNode.__post_init__ = _post_init  # type: ignore[method-assign]


def parse(text: str) -> cst.Module:
    """cst.parse_module, without re-validating what the parser made."""
    _parsing.active = True
    try:
        return cst.parse_module(text)
    finally:
        _parsing.active = False


_T = TypeVar("_T")


class _Chunk:
    """A chunk's statements as the module holds them, and whether any has an indented block."""

    __slots__ = ("statements", "header", "newline", "indent", "has_block", "memos")

    def __init__(self, statements: tuple[cst.BaseStatement, ...], header: tuple[cst.EmptyLine, ...],
                 newline: str, indent: str, has_block: bool):
        self.statements = statements
        self.header = header
        self.newline = newline
        self.indent = indent
        self.has_block = has_block
        # What memo() worked out from the chunk's nodes; their ids stay theirs while it is kept.
        self.memos: dict[tuple[str, int, object], object] = {}


_chunks: OrderedDict[tuple[bool, str], _Chunk] = OrderedDict()
_owners: dict[int, _Chunk] = {}  # a kept chunk's statements, by id
_kept_text = 0


def parse_module(source: str, tree: ast.Module | None) -> cst.Module:
    """The libcst module of `source`, whose CPython tree is `tree` (None: parse it whole). Raises
    what libcst's own parse raises."""
    module = _assemble(source, tree) if tree is not None and _max_kept_text else None
    return module if module is not None else parse(source)


def _assemble(source: str, tree: ast.Module) -> cst.Module | None:
    spans = _statement_spans(tree)
    if len(spans) < 2 or source.startswith("\ufeff"):
        return None
    lines = split_lines(source)
    if spans[-1][1] > len(lines):
        return None
    chunks: list[_Chunk] = []
    used: set[int] = set()
    start = 0
    for index, (_, last) in enumerate(spans):
        chunk = _chunk("".join(lines[start:last]), index == 0, used)
        if chunk is None:
            return None
        start = last
        chunks.append(chunk)
    footer: tuple[cst.EmptyLine, ...] = ()
    tail = "".join(lines[start:])
    if tail:
        try:
            rest = parse(tail)
        except Exception:  # noqa: BLE001 - libcst reads it differently alone: parse the file whole
            return None
        if rest.body:
            return None
        footer = (*rest.header, *rest.footer)
    return module_of(chunks, chunks[0].header, footer, source.endswith(("\n", "\r")))


def _statement_spans(tree: ast.Module) -> list[tuple[int, int]]:
    """Each top-level statement's first line (its first decorator's) and last line, statements
    that share a line (`import a; import b`) joined."""
    spans: list[tuple[int, int]] = []
    for statement in tree.body:
        decorators = getattr(statement, "decorator_list", None)
        first = min([statement.lineno, *(d.lineno for d in decorators)]) if decorators else statement.lineno
        last = statement.end_lineno or statement.lineno
        if spans and first <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], last))
        else:
            spans.append((first, last))
    return spans


def _chunk(text: str, first: bool, used: set[int]) -> _Chunk | None:
    """The chunk of this text, from the cache when this file has not used it yet (a text that
    comes twice in one file gets nodes of its own the second time: the analysis tells nodes apart
    by identity)."""
    key = (first, text)
    chunk = _chunks.get(key)
    if chunk is not None and id(chunk) not in used:
        _chunks.move_to_end(key)
    else:
        chunk = _parse_chunk(text, first)
        if chunk is None:
            return None
        if key not in _chunks:
            _keep(key, chunk)
    used.add(id(chunk))
    return chunk


def _keep(key: tuple[bool, str], chunk: _Chunk) -> None:
    global _kept_text
    _chunks[key] = chunk
    _kept_text += len(key[1])
    for statement in chunk.statements:
        _owners[id(statement)] = chunk
    while _kept_text > _max_kept_text and len(_chunks) > 1:
        (_, text), gone = _chunks.popitem(last=False)
        _kept_text -= len(text)
        for statement in gone.statements:
            del _owners[id(statement)]


def _parse_chunk(text: str, first: bool) -> _Chunk | None:
    try:
        module = parse(text)
    except Exception:  # noqa: BLE001 - libcst reads it differently alone: parse the file whole
        return None
    if not module.body or module.footer or not module.has_trailing_newline:
        return None  # not one statement ending in a line break: out of the ordinary, parse whole
    statements = tuple(module.body)
    header = tuple(module.header)
    if header and not first:
        # Between statements, the lines before one are its leading lines in a whole parse.
        statements = (statements[0].with_changes(leading_lines=(*header, *statements[0].leading_lines)),
                      *statements[1:])
        header = ()
    return _Chunk(statements, header, module.default_newline, module.default_indent,
                  any(_has_block(s) for s in statements))


def statement(text: str) -> _Chunk | None:
    """One top-level statement's text (with any lines inside it), parsed on its own; None where
    libcst reads it differently alone or it is not one statement ending in a line break."""
    return _parse_chunk(text, False)


def module_of(chunks: list[_Chunk], header: tuple[cst.EmptyLine, ...] = (),
              footer: tuple[cst.EmptyLine, ...] = (), trailing_newline: bool = True) -> cst.Module | None:
    """The module whose body is these statements, in order, as libcst would parse their texts
    joined; None where they disagree on the newline (mixed line endings) or the indentation that
    libcst's module keeps for all."""
    body: list[cst.BaseStatement] = []
    newline = indent = None
    for chunk in chunks:
        if newline is None:
            newline = chunk.newline
        elif chunk.newline != newline:
            return None
        if chunk.has_block:
            if indent is None:
                indent = chunk.indent
            elif chunk.indent != indent:
                return None
        body.extend(chunk.statements)
    return cst.Module(body=tuple(body), header=header, footer=footer, encoding="utf-8",
                      default_indent=indent or "    ", default_newline=newline or "\n",
                      has_trailing_newline=trailing_newline)


def _has_block(statement: cst.CSTNode) -> bool:
    """Whether the statement holds an indented block, whose `indent=None` means the module's."""
    body = getattr(statement, "body", None)
    if isinstance(body, cst.IndentedBlock):
        return True
    for field in ("orelse", "finalbody"):
        part = getattr(statement, field, None)
        if part is not None and _has_block(part):
            return True
    return any(_has_block(part) for field in ("handlers", "cases") for part in getattr(statement, field, ()))


def keeping() -> bool:
    """Whether parsed statements are kept (the language server)."""
    return _max_kept_text > 0


def kept_chunks() -> int:
    """How many chunks are kept now."""
    return len(_chunks)


def forget() -> None:
    """Drop every kept chunk and what was worked out from it: the next parse starts afresh."""
    global _kept_text
    _chunks.clear()
    _owners.clear()
    _kept_text = 0


def memo(kind: str, node: cst.CSTNode, within: cst.CSTNode | None, compute: Callable[[], _T],
         extra: object = None) -> _T:
    """What `compute` works out from `node` (and `extra`) alone, kept with the cached chunk whose
    top-level statement `within` holds the node: a statement the parse reuses brings back what was
    worked out for it, and the answer goes when the chunk does. A node of a file parsed whole, or
    not known to be in one of the file's statements (None), is never handed out again: its
    answers are not kept."""
    chunk = _owners.get(id(within)) if within is not None else None
    if chunk is None:
        return compute()
    key = (kind, id(node), extra)
    if key in chunk.memos:
        return chunk.memos[key]  # type: ignore[return-value]
    value = chunk.memos[key] = compute()
    return value
