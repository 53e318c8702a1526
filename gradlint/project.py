"""The project around a checked file: which of its imports are the project's own modules, and
what each of those says about a name (is `BaseModel` an nn.Module? does `compute_loss` return a
graph-attached tensor?).

Real training code splits one step over several files (the loss in `losses.py`, the model in
`models/`, a trainer base class), so a name imported from the project must carry the same facts
as one defined in the file. A module's top-level names are read from CPython's tree (syntax only:
which names are defs, classes, imports); what a class is, or what a def returns, comes from the
same analysis (`FileModel`) run on that statement of the defining module, on demand: nothing is
parsed unless a checked file asks about it. What a module cannot tell (a missing file, a syntax
error, an import cycle, a name it does not define) is unknown, never a guess and never a crash.

Every module consulted is recorded (`consulted`), transitively, with the digest of its bytes and
of each part read there (`ModuleFacts.part`): a name looked up, the statements a model was built
from, a statement's text. A cached result of the checked file holds while each module is byte for
byte the same or reads the same in those parts: a change to `losses.py`'s `compute_loss` re-checks
the trainer that calls it, and a change to a def nobody outside asked about re-checks only
`losses.py`. What was read of the file system is recorded the same way: the places a module was
looked for in vain, and the `__init__.py` files and project markers that set the checked file's
package and roots, so a module that comes back after a deletion re-checks its importers.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator, Protocol

import libcst as cst

from gradlint import parse
from gradlint.findings import Reads
from gradlint.names import ImportTable
from gradlint.prechecks import children, walk
from gradlint.prescan import STORING_METHODS
from gradlint.native_sources import NativeSources, NativeSum, read_sources
from gradlint.script_paths import added_directories
from gradlint.source import DEFAULT_MAX_BYTES, Unreadable, decode_source, read_bytes, split_lines
from gradlint.torch_api import FUNCTION_BASES, is_module_base


class ModuleModel(Protocol):
    """What the project asks of a module's analysis (FileModel answers). Declared here so the
    project index depends on no model: the engine hands it a function that builds one."""

    functions: dict[str, cst.FunctionDef]
    top_level_classes: dict[str, cst.ClassDef]
    imports: ImportTable
    module_names: set[str]
    function_class_names: set[str]
    module_class_names: set[str]

    def method_of(self, class_name: str, method: str) -> tuple[cst.FunctionDef, object] | None: ...

    def class_attribute(self, class_name: str, attribute: str) -> object | None: ...


# Re-exports through `__init__` files and aliases chain; a longer chain than this is a cycle or
# something stranger, and stays unknown.
_MAX_HOPS = 8
# The markers of a project's top directory, where its `src/` layout and top-level packages live.
_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def bytes_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def file_digest(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str | None:
    """The digest of a file's bytes now, or None when it cannot be read."""
    data = read_bytes(path, max_bytes)
    return None if isinstance(data, Unreadable) else bytes_digest(data)


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


def module_name_of(path: str, looked: dict[str, bool] | None = None) -> tuple[str, str]:
    """The directory Python needs on sys.path to import the file, and the file's dotted name
    from there: up through the directories that hold an `__init__.py`. `looked` gets each
    `__init__.py` looked for, and whether it was there."""
    file = Path(os.path.abspath(path))
    parts = [] if file.name == "__init__.py" else [file.stem]
    directory = file.parent
    while True:
        init = directory / "__init__.py"
        there = init.is_file()
        if looked is not None:
            looked[str(init)] = there
        if not there or directory.parent == directory:
            break
        parts.insert(0, directory.name)
        directory = directory.parent
    return str(directory), ".".join(parts)


def _project_top(start: str, looked: dict[str, bool] | None = None) -> str | None:
    """The nearest directory from `start` up with a project marker. `looked`: as module_name_of's."""
    directory = Path(start)
    for candidate in (directory, *directory.parents):
        for marker in _PROJECT_MARKERS:
            place = candidate / marker
            there = place.exists()
            if looked is not None:
                looked[str(place)] = there
            if there:
                return str(candidate)
    return None


@dataclass(frozen=True)
class ClassFacts:
    """What a class of another module is, as that module's own analysis decides it."""

    kind: str  # "module" (an nn.Module), "function" (an autograd Function), or "plain"
    module: "ModuleFacts"
    statement: "Statement"

    @property
    def where(self) -> str:
        """`models/base.py:12`, for messages: from the file being checked now. The facts are kept
        for the run, and a path fixed when they were made read from whichever file asked first
        (botorch's `Model (model.py:44)` or `(../../botorch/models/model.py:44)`, by worker order)."""
        return self.module.where(self.statement)


@dataclass(frozen=True)
class Definition:
    """A name resolved to the module that defines it."""

    module: "ModuleFacts"
    name: str


@dataclass
class Symbols:
    """A module's top-level names, read from CPython's tree (about 10x cheaper than libcst's):
    which are defs and classes (and the lines of their statements), which come from imports, and
    what it star-imports. Syntax only: what a class *is* comes from the model (`ModuleFacts.model`)."""

    statements: dict[str, Statement]  # def and class names
    aliases: dict[str, str]  # imported name -> what it stands for (relative imports resolved)
    other: set[str]  # bound some other way (`Encoder = make_encoder()`): unknown
    stars: list[str]
    exported: frozenset[str] | None  # a literal __all__
    kept: list[tuple[int, int]]  # the line ranges of the other top-level statements (imports, ...)


@dataclass(frozen=True)
class Statement:
    """A top-level def or class, as much of it as the project keeps (not the tree: a run may
    read thousands of modules)."""

    index: int  # in the module's body
    first: int  # its first line (its first decorator's), 1-based
    last: int
    is_class: bool
    bases: tuple[str, ...] = ()  # a class's bases as written (`nn.Module`, `Base`); "" for one not a dotted name
    methods: frozenset[str] = frozenset()  # a class's own defs
    line: int = 0  # the `def` or `class` line, below any decorators: the line messages name


# What a def given a value may keep past the call, as FileModel.call_result keeps a walk's events
# for its caller (_outlives_the_call): a store into an attribute (`self.x = v`, `obj.x = v`), a
# name declared global or nonlocal, or a container that is no local of the def (a global's, an
# attribute's: `SEEN.append(v)`, `self.buf[k] = v`), or one it hands to a def or method of its
# module or takes as a default (a helper adding to its parameter adds to it); setattr. Read from
# the syntax alone, widened: a local is a parameter or a name the def binds itself (what Python
# counts local), any other container may be a global.
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_HANDED = frozenset({ast.Name, ast.Attribute, ast.Subscript})  # a container a call may be handed
_SCOPES = (*_DEFS, ast.ClassDef)


def _python_tree(source: str, path: str) -> ast.Module | None:
    """CPython's tree of a module's text, or None where it does not parse; quietly (a `"\\d"` in a
    user's string warns on Python 3.12: not ours to report, as engine._python_ast says)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return compile(source, path, "exec", ast.PyCF_ONLY_AST)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def _may_store(statement: ast.stmt, defs: frozenset[str]) -> bool:
    """Whether a def or class of the module (each def in it, nested ones and lambdas too) may keep
    a value it is given past the call. A def of another module that cannot is never walked for a
    keep: FileModel.imported_call finds nothing kept of the call's arguments. `defs`: the
    module's defs and classes kept with it (the calls flow follows there)."""
    return any(isinstance(node, _DEFS) and _def_may_store(node, defs) for node in walk(statement))


def _def_may_store(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, defs: frozenset[str]) -> bool:
    arguments = function.args
    positional = (*arguments.posonlyargs, *arguments.args)
    first = positional[0].arg if positional else None  # a method's self
    if any(type(default) in _HANDED for default in (*arguments.defaults, *arguments.kw_defaults)):
        return True  # `def add(v, buf=SEEN)`: flow binds the global (file_model._global_default)
    local = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                             *(a for a in (arguments.vararg, arguments.kwarg) if a is not None))}
    own: list[ast.AST] = []
    todo = list(function.body) if isinstance(function.body, list) else [function.body]
    while todo:  # the def's own nodes: a nested def or class is a scope of its own, asked on its own
        node = todo.pop()
        own.append(node)
        todo.extend(child for child in children(node) if not isinstance(child, _SCOPES))
    for node in own:
        kind = type(node)
        if kind is ast.Global or kind is ast.Nonlocal:
            return True
        if kind is ast.Name and type(node.ctx) is ast.Store:
            local.add(node.id)

    def kept(container: ast.expr) -> bool:  # a container that may outlive the call
        return not (type(container) is ast.Name and container.id in local)

    for node in own:
        kind = type(node)
        if kind is ast.Attribute and type(node.ctx) is ast.Store:
            return True
        if kind is ast.Subscript and type(node.ctx) is ast.Store and kept(node.value):
            return True
        if kind is ast.Call:
            func = node.func
            if type(func) is ast.Attribute and func.attr in STORING_METHODS and kept(func.value):
                return True
            if type(func) is ast.Name and func.id == "setattr":
                return True
            # `_push(HISTORY, v)`, `self._push(self.buf, v)`: what a def or method of the module adds
            # to its parameter is added to what the call handed it (flow follows those calls with
            # its keep), which may outlive the call.
            followed = (type(func) is ast.Name and func.id in defs) or (
                type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == first)
            handed = (*node.args, *(k.value for k in node.keywords))
            if followed and any(type(a) in _HANDED and kept(a) for a in handed):
                return True
    return False


def _symbols(tree: ast.Module, package: str) -> Symbols:
    table = ImportTable(package or None)
    statements: dict[str, Statement] = {}
    kept: list[tuple[int, int]] = []
    other: set[str] = set()
    exported = None
    top_level = {id(statement) for statement in tree.body}
    stack = [(i, statement) for i, statement in enumerate(tree.body)]
    stack.reverse()
    while stack:
        index, node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if id(node) in top_level:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                is_class = isinstance(node, ast.ClassDef)
                statements[node.name] = Statement(
                    index, first, node.end_lineno or first, is_class,
                    tuple(_dotted(b) for b in node.bases) if is_class else (),
                    frozenset(n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
                    if is_class else frozenset(), node.lineno)
            table.aliases.pop(node.name, None)
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            table.add(_as_cst_import(node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        other.add(name.id)
                        table.aliases.pop(name.id, None)
                        if name.id == "__all__" and isinstance(node, ast.Assign) \
                                and isinstance(node.value, (ast.List, ast.Tuple)):
                            exported = frozenset(e.value for e in node.value.elts
                                                 if isinstance(e, ast.Constant) and isinstance(e.value, str))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            # `try: from .fast import f except ImportError: ...`: the names bound at the top level.
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [handler.body for handler in getattr(node, "handlers", [])]
            stack.extend((index, child) for block in reversed(blocks) for child in reversed(block))
    other -= set(statements)
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            kept.append((node.lineno, node.end_lineno or node.lineno))
    return Symbols(statements, table.aliases, other, table.stars, exported, kept)


def _dotted(node: ast.expr) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def _as_cst_import(node: ast.Import | ast.ImportFrom) -> cst.Import | cst.ImportFrom:
    """The libcst form ImportTable reads, built from CPython's node (one import table for both)."""
    def dotted_name(text: str) -> cst.BaseExpression:
        parts = text.split(".")
        expr: cst.BaseExpression = cst.Name(parts[0])
        for part in parts[1:]:
            expr = cst.Attribute(expr, cst.Name(part))
        return expr

    aliases = [cst.ImportAlias(dotted_name(a.name), cst.AsName(cst.Name(a.asname)) if a.asname else None)
               for a in node.names if a.name != "*"]
    if isinstance(node, ast.Import):
        return cst.Import(aliases)
    names = cst.ImportStar() if any(a.name == "*" for a in node.names) else aliases
    return cst.ImportFrom(module=dotted_name(node.module) if node.module else None, names=names,
                          relative=[cst.Dot()] * node.level)


class ModuleFacts:
    """One module of the project: its names read cheaply, and models of the parts asked about."""

    def __init__(self, project: "Project", path: str, dotted: str, source: str, digest: str):
        self.project = project
        self.path = path
        self.dotted = dotted
        self.source = source
        self.digest = digest  # of the file's bytes, as `file_digest` computes it
        self.stamp: tuple[int, int, int] | None = None  # the file's mtime, size and inode when read
        # What this module's answers so far rested on (its bases' modules, its callees', its own parts).
        self.depends: dict[str, Reads] = {}
        self._symbols: Symbols | None = None
        self._symbols_failed = False
        self._models: dict[frozenset[int], ModuleModel | None] = {}
        self._statements: dict[tuple[int, int], object] = {}  # a kept statement's lines -> its parse (_kept_module)
        self._kept_texts: dict[frozenset[str], str] = {}  # model_text_holds: the kept text, lower case
        self._kept_keeps: dict[frozenset[str], bool] = {}  # _keeps: whether the kept text may keep arguments
        self._classes: dict[str, ClassFacts | None] = {}
        self._read_names: dict[str, frozenset[str]] = {}  # _names_read
        self._parts: dict[str, str] = {}

    @property
    def package(self) -> str:
        """The package relative imports of this module start from."""
        if os.path.basename(self.path) == "__init__.py":
            return self.dotted
        return self.dotted.rpartition(".")[0]

    @property
    def symbols(self) -> Symbols | None:
        if self._symbols is None and not self._symbols_failed:
            tree = _python_tree(self.source, self.path)
            if tree is None:
                self._symbols_failed = True
            else:
                self._symbols = _symbols(tree, self.package)
        return self._symbols

    def model_for(self, name: str) -> ModuleModel | None:
        """The analysis of this module with only what `name`'s statement can need: the imports,
        that def or class, and the module's own defs and classes it names (its bases, its
        helpers), transitively. Every other top-level statement is left out, so a 6,000-line
        module asked about one class costs that class (`_kept_source`)."""
        self.project._note_part(self, f"model:{name}")
        wanted = self._wanted(name)
        if wanted is None or self.dotted in self.project._under_way:
            return None  # unknown here (a cycle back to a module being read, for one)
        key = frozenset(wanted)
        if key not in self._models:
            with self.project.asking(self):
                self._models[key] = self.project._build_model(self, self._kept_source(wanted),
                                                              self._kept_module(wanted))
        return self._models[key]

    def _kept_module(self, wanted: set[str]) -> cst.Module | None:
        """libcst's module of `_kept_source(wanted)`, put together from its statements, each parsed
        once per process: the models asked of one module keep overlapping statements (its imports,
        a helper every def calls), and parsing each kept text whole read 11.9 MB for 1,240 models
        in a run over the real-world corpus where 40% of it was distinct (40 unsloth files).
        None: parse the kept text whole (statements sharing a line, a chunk libcst reads otherwise
        alone, mixed newlines or indentation)."""
        chunks = []
        previous = 0
        for first, last in self._kept_ranges(wanted):
            if first <= previous:
                return None  # `import a; import b` kept twice, or ranges the text joins
            previous = last
            if (first, last) not in self._statements:
                self._statements[(first, last)] = parse.statement("".join(self.lines[first - 1:last]))
            chunk = self._statements[(first, last)]
            if chunk is None:
                return None
            chunks.append(chunk)
        return parse.module_of(chunks)

    def may_keep_arguments(self, name: str) -> bool:
        """Whether `name`'s def, or a def or class of this module it names (what `model_for(name)`
        keeps), has a store that may keep a value past a call (`_may_store`). Read from CPython's
        tree of that kept text, asked once per process; nothing is parsed with libcst."""
        self.project._note_part(self, f"keeps:{name}")
        return self._keeps(name)

    def _keeps(self, name: str) -> bool:
        wanted = self._wanted(name)
        if wanted is None:
            return False
        key = frozenset(wanted)
        found = self._kept_keeps.get(key)
        if found is None:
            tree = _python_tree(self._kept_source(wanted), self.path)
            found = self._kept_keeps[key] = tree is None or any(
                _may_store(statement, key) for statement in tree.body if isinstance(statement, _SCOPES))
        return found

    def model_text_holds(self, name: str, words: tuple[str, ...]) -> bool:
        """Whether the text `model_for(name)` would keep holds one of `words` (in any case)."""
        self.project._note_part(self, f"model:{name}")  # what the answer rests on, as model_for's
        wanted = self._wanted(name)
        if wanted is None:
            return False
        key = frozenset(wanted)
        text = self._kept_texts.get(key)
        if text is None:  # asked once to decide whether to follow a call, then again to follow it
            text = self._kept_texts[key] = self._kept_source(wanted).lower()
        return any(word in text for word in words)

    def _wanted(self, name: str) -> set[str] | None:
        """`name` and the module's own defs and classes it names, transitively."""
        symbols = self.symbols
        if symbols is None or name not in symbols.statements:
            return None
        wanted = {name}
        todo = [name]
        while todo:
            for other in self._names_read(todo.pop()):
                if other in symbols.statements and other not in wanted:
                    wanted.add(other)
                    todo.append(other)
        return wanted

    def _names_read(self, name: str) -> frozenset[str]:
        """The names a top-level def or class reads (its bases, the helpers it calls), from
        CPython's tree of its own lines, read when a model first asks: most modules the project
        reads are asked only what a name is. Walking every def when the symbols were read took
        the project's symbols 0.58 s on torch's sources (one core, 316 modules); read on demand,
        0.15 s, and 0.18 s to parse the 884 statements asked about. A top-level def or class
        shares no line with another statement, so its lines parse alone."""
        found = self._read_names.get(name)
        if found is None:
            statement = self.symbols.statements[name]  # type: ignore[union-attr]
            tree = _python_tree("".join(self.lines[statement.first - 1:statement.last]), self.path)
            found = self._read_names[name] = frozenset() if tree is None else frozenset(
                n.id for n in walk(tree) if isinstance(n, ast.Name))
        return found

    def _kept_ranges(self, wanted: set[str]) -> list[tuple[int, int]]:
        symbols = self.symbols
        assert symbols is not None
        return sorted([*symbols.kept, *((s.first, s.last) for n, s in symbols.statements.items() if n in wanted)])

    def _kept_source(self, wanted: set[str]) -> str:
        """The kept statements' lines, one after the other. The others are left out, not blanked:
        libcst makes a node for every blank line (parsing output_graph.py's 4,718 lines blanked but
        for 60 took 39.8 ms, the 60 alone 1.6 ms), and nothing reads a position in another
        module's model (a message cites the line CPython's tree gives: `where`)."""
        lines = self.lines
        keep = [False] * len(lines)
        for first, last in self._kept_ranges(wanted):
            for line in range(first - 1, min(last, len(lines))):
                keep[line] = True
        return "".join(text for text, kept in zip(lines, keep) if kept)

    def part(self, facet: str) -> str:
        """The digest of one part of this module as an answer reads it, so a cached result can tell
        whether an edit reached what it read: where a part reads the same in two versions of the
        module, so does every answer resting on it.
        - `name:N`: what looking `N` up finds (a def or class with its lines, bases and methods, an
          import's target, another binding, or the star imports searched next);
        - `model:N`: the statements `model_for(N)` keeps, with their lines and text: the model is
          built from those and nothing else (every other line is blank);
        - `keeps:N`: the statements `model_for(N)` would keep, and whether they may keep what a
          call gives them (`may_keep_arguments`);
        - `text:N`: the lines of `N`'s statement (a method's line, for messages);
        - `symbols`: every top-level name (what a star import binds)."""
        digest = self._parts.get(facet)
        if digest is None:
            digest = self._parts[facet] = bytes_digest(repr(self._read(facet)).encode("utf-8", "surrogatepass"))
        return digest

    def lookup(self, name: str) -> tuple[str, object] | None:
        """What the module binds `name` to, as a name is resolved here: ("statement", its def or
        class), ("alias", what an import names), ("other", None) for another binding, or
        ("stars", the modules star-imported, searched next). None: the module does not parse."""
        symbols = self.symbols
        if symbols is None:
            return None
        if name in symbols.statements:
            return "statement", symbols.statements[name]
        target = symbols.aliases.get(name)
        if target is not None and target != name:
            return "alias", target
        if name in symbols.other:
            return "other", None
        return "stars", symbols.stars

    @cached_property
    def lines(self) -> list[str]:
        """The source's lines with their breaks, broken where Python breaks them (a form feed
        between two defs is no line break: str.splitlines would shift every line after it): for
        the modules whose statements are asked about."""
        return split_lines(self.source)

    def _read(self, facet: str) -> object:
        if facet == NATIVE:
            return self.digest  # a C++ or CUDA source: its bytes, whatever they say
        symbols = self.symbols
        if symbols is None:
            return "no symbols"  # a syntax error: the module answers nothing
        kind, _, name = facet.partition(":")
        if kind == "name":
            found_as = self.lookup(name)
            if found_as is not None and found_as[0] == "statement":
                found = found_as[1]  # its place and shape, not the names it reads (a model's part)
                return ("class" if found.is_class else "def", found.first, found.line, found.last, found.bases,
                        sorted(found.methods))
            return found_as
        if kind == "model":
            wanted = self._wanted(name)
            if wanted is None:
                return None
            return sorted(wanted), [(first, "".join(self.lines[first - 1:last])) for first, last in self._kept_ranges(wanted)]
        if kind == "keeps":
            wanted = self._wanted(name)
            return None if wanted is None else (sorted(wanted), self._keeps(name))
        if kind == "text":
            found = symbols.statements.get(name)
            return None if found is None else self.lines[found.first - 1:found.last]
        if kind == "symbols":
            return sorted(symbols.statements), sorted(symbols.aliases.items()), symbols.stars, \
                sorted(symbols.exported) if symbols.exported is not None else None
        raise ValueError(f"unknown part {facet!r}")

    def where(self, statement: Statement) -> str:
        """`pkg/models/base.py:4`, relative to the checked file's directory, for messages."""
        relative = os.path.relpath(self.path, self.project.anchor) if self.project.anchor else self.path
        return f"{relative}:{statement.line}"


class Project:
    """The modules importable from the checked files' package roots and project top."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES,
                 build_model: Callable[[cst.Module, str, str, "Project"], ModuleModel] | None = None):
        self.max_bytes = max_bytes
        self._build = build_model
        # Where the current file's imports are looked for: its own root, and its project's top
        # directory and `src/`. Modules are kept per set of roots: two projects checked in one run
        # (or open in one editor) each have their `utils.meters`, and neither may answer for the other.
        self._roots: tuple[str, ...] = ()
        # (roots, dotted name, apart) -> facts (None: not the project's); `apart` keeps modules
        # found through one directory's sys.path additions to the files of that directory
        self._modules: dict[tuple[tuple[str, ...], str, str], ModuleFacts | None] = {}
        # (roots, dotted name, apart) -> the places looked at in vain before finding it (see _note_absent)
        self._absent: dict[tuple[tuple[str, ...], str, str], list[tuple[str, Reads]]] = {}
        self._under_way: set[str] = set()
        self._asking: list[ModuleFacts] = []
        self.calls_under_way = 0  # calls followed into other modules, nested (see FileModel.imported_call)
        self.anchor = ""  # the checked file's directory: where the names in messages start from
        self._added: tuple[str, ...] = ()  # the directories the checked file puts on sys.path
        # The checked file's project top (a pyproject.toml, setup.py, .git), or else its package root
        self._top: str | None = None
        # The C++ and CUDA sources under a project top, indexed once, with their digests and stamps
        # (None: too many to read)
        self._native: dict[str, tuple[NativeSources, dict[str, str], dict[str, tuple | None]] | None] = {}
        self._native_noted: set[tuple[int, str]] = set()  # (id of a record, top) noted since begin
        self.current = ""  # the checked file's dotted name
        # Every project module read for the current file, and what was read of it.
        self.consulted: dict[str, Reads] = {}

    # ----- the file being checked -------------------------------------------------------------

    def begin(self, path: str, tree: ast.Module | None = None) -> str:
        """Start on a checked file: its roots join the search path, and the directories it puts
        on sys.path itself, read from its CPython `tree` (script_paths). Returns its dotted name."""
        # What decides the roots is read too: an `__init__.py` or a pyproject.toml that comes or
        # goes changes the file's package or project, and so what its imports name.
        looked: dict[str, bool] = {}
        root, dotted = module_name_of(path, looked)
        roots = [root]
        top = _project_top(root, looked)
        if top is not None:
            roots += [top, os.path.join(top, "src")]
            looked[roots[-1]] = os.path.isdir(roots[-1])
        self._roots = tuple(dict.fromkeys(r for r in roots if os.path.isdir(r)))
        self._top = top if top is not None else root  # a package root: where its imports are found
        self.anchor = os.path.dirname(os.path.abspath(path))
        self._added = added_directories(tree, path) if tree is not None else ()
        self._native_noted = set()
        self.consulted = {place: Reads("", "", {EXISTS: "yes" if there else "no"}) for place, there in looked.items()}
        self._under_way = {dotted}
        self.current = dotted
        return dotted

    def refresh(self) -> None:
        """Forget the modules edited since they were read, and those whose answers read something
        that reads otherwise now (a part of an edited module, a module that appeared where one was
        looked for in vain): for a process that lives across edits (an editor's server). An edit
        no answer read keeps the other modules' models. A batch run reads each module once and
        needs none of this. What a module's answers read of other modules through a third is in
        its own record too (`_note`), so no cascade is needed."""
        loaded = self._loaded()
        disk = Disk(self.max_bytes)
        stale = {path for path, module in loaded.items() if _stamp(path) != module.stamp}
        stale |= {path for path, module in loaded.items() if path not in stale and not all(
            disk.still_reads(other, reads) for other, reads in module.depends.items() if other != path)}
        # A module not found before may have been created since: looked for again, as are the stale.
        self._modules = {k: v for k, v in self._modules.items() if v is not None and v.path not in stale}
        self._absent = {}
        # C++ and CUDA sources are indexed again when one of them was edited (one added is not seen)
        self._native = {top: indexed for top, indexed in self._native.items()
                        if indexed is None or all(_stamp(path) == stamp for path, stamp in indexed[2].items())}

    def _loaded(self) -> dict[str, ModuleFacts]:
        return {module.path: module for module in self._modules.values() if module is not None}

    # ----- names ------------------------------------------------------------------------------

    def resolve(self, qualified: str, hops: int = 0) -> Definition | None:
        """The module of the project that defines `qualified` (`pkg.models.Encoder`), through
        re-exports (`from .encoder import Encoder` in `pkg/models/__init__.py`), aliases and star
        imports. None: not the project's, or not found."""
        if hops > _MAX_HOPS or not qualified or qualified.startswith("."):
            return None
        parts = qualified.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = self.module(".".join(parts[:cut]))
            if module is None:
                continue
            rest = parts[cut:]
            if len(rest) != 1:
                # `pkg.sub.Name` where `pkg.sub` is a package: its submodule, asked above at a longer
                # cut; an attribute of a class (`Outer.Inner`) stays unknown.
                return None
            return self._defined_in(module, rest[0], hops)
        return None

    def _defined_in(self, module: ModuleFacts, name: str, hops: int) -> Definition | None:
        # Noted before anything is read, failures too: the answer rests on what the module says
        # now, syntax error included, and must change when the module does.
        self._note_part(module, f"name:{name}")
        found_as = module.lookup(name)
        if found_as is None:
            return None
        kind, value = found_as
        if kind == "statement":
            return Definition(module, name)
        if kind == "alias":
            return self.resolve(value, hops + 1)
        if kind == "other":
            return None  # bound here some other way (`Encoder = make_encoder()`): unknown
        for star in value:
            found = self.resolve(f"{star}.{name}", hops + 1)
            if found is not None:
                return found
        submodule = self.module(f"{module.dotted}.{name}") if module.dotted else None
        return Definition(submodule, "") if submodule is not None else None

    def class_facts(self, qualified: str) -> ClassFacts | None:
        found = self.resolve(qualified)
        if found is None or not found.name:
            return None
        module = found.module
        if found.name in module._classes:
            return module._classes[found.name]
        symbols = module.symbols
        if symbols is None or not symbols.statements[found.name].is_class:
            module._classes[found.name] = None
            return None
        module._classes[found.name] = None  # a class that inherits from itself through a cycle
        statement = symbols.statements[found.name]
        with self.asking(module):
            kind = self._kind_from_bases(module, statement)
            if kind is None and "forward" in statement.methods:
                # A base from outside the project (or unknown): what the module's own analysis
                # makes of the class (FileModel's `_module_like`: forward and layers built in __init__).
                model = module.model_for(found.name)
                if model is not None and found.name in model.top_level_classes:
                    kind = ("function" if found.name in model.function_class_names else
                            "module" if found.name in model.module_class_names else None)
        facts = ClassFacts(kind or "plain", module, statement)
        module._classes[found.name] = facts
        return facts

    def _qualified_bases(self, module: ModuleFacts, statement: Statement) -> Iterator[str]:
        """A class statement's bases as its module's names qualify them (`nn.Module` as
        `torch.nn.Module`, `Base` as `pkg.models.Base`); "" for one not a dotted name. `object` is
        left out."""
        symbols = module.symbols
        assert symbols is not None
        for base in statement.bases:
            head, _, rest = base.partition(".")
            if base == "object":
                continue
            if not base:
                yield ""
                continue
            self._note_part(module, f"name:{head}")
            if head in symbols.statements and not rest:
                yield f"{module.dotted}.{head}" if module.dotted else head
            else:
                target = symbols.aliases.get(head)
                yield (f"{target}.{rest}" if rest else target) if target else base

    def outside_bases(self, qualified: str) -> frozenset[str]:
        """The bases from outside the project that a project class reaches through its bases
        (`GKDTrainer(SFTTrainer)`, SFTTrainer's base `transformers.Trainer`): what a framework
        makes of its subclasses' methods (torch_api.GRAD_OFF_METHODS, PER_STEP_METHODS)."""
        found: set[str] = set()
        todo, seen = [qualified], {qualified}
        while todo:
            definition = self.resolve(todo.pop())
            if definition is None or not definition.name:
                continue
            module = definition.module
            symbols = module.symbols
            if symbols is None or not symbols.statements[definition.name].is_class:
                continue
            with self.asking(module):
                for base in self._qualified_bases(module, symbols.statements[definition.name]):
                    if not base or base in seen:
                        continue
                    seen.add(base)
                    if self.resolve(base) is None:
                        found.add(base)  # not a class of the project
                    else:
                        todo.append(base)
        return frozenset(found)

    def _kind_from_bases(self, module: ModuleFacts, statement: Statement) -> str | None:
        """"module" or "function" when a base is one (followed through the project's modules),
        "plain" when every base is known and none is, None when some base is unknown."""
        unknown = False
        for qualified in self._qualified_bases(module, statement):
            if not qualified:
                unknown = True
                continue
            if qualified in FUNCTION_BASES:
                return "function"
            if is_module_base(qualified):
                return "module"
            facts = self.class_facts(qualified)
            if facts is None:
                unknown = True
            elif facts.kind in ("module", "function"):
                return facts.kind
        return None if unknown else "plain"

    def _top_def(self, qualified: str) -> Definition | None:
        """Where `qualified` is a top-level def (not a class) of a project module."""
        found = self.resolve(qualified)
        symbols = found.module.symbols if found is not None and found.name else None
        return found if symbols is not None and not symbols.statements[found.name].is_class else None

    def function(self, qualified: str, holding: tuple[str, ...] = ()) -> tuple[ModuleModel, cst.FunctionDef, ModuleFacts] | None:
        """A top-level def of another module, with a model of that module to ask about it. With
        `holding`, only where the text that model would keep holds one of those words: a question
        about calls so named is answered without parsing a module that has none."""
        found = self._top_def(qualified)
        if found is None or (holding and not found.module.model_text_holds(found.name, holding)):
            return None
        model = found.module.model_for(found.name)
        if model is None or found.name not in model.functions:
            return None
        return model, model.functions[found.name], found.module

    def function_text_holds(self, qualified: str, words: tuple[str, ...]) -> bool:
        """Whether `qualified` is a top-level def of a project module whose kept text (what
        `function` would parse) holds one of `words`."""
        found = self._top_def(qualified)
        return found is not None and found.module.model_text_holds(found.name, words)

    def def_text_holds(self, qualified: str, words: tuple[str, ...]) -> bool:
        """Whether `qualified` is a top-level def of a project module whose own lines (its
        decorators and body, not the module's imports) hold one of `words`. Nothing is parsed."""
        found = self._top_def(qualified)
        if found is None:
            return False
        self._note_part(found.module, f"text:{found.name}")
        statement = found.module.symbols.statements[found.name]
        text = "".join(found.module.lines[statement.first - 1:statement.last])
        return any(word in text for word in words)

    def function_may_keep_arguments(self, qualified: str) -> bool:
        """Whether `qualified` is a top-level def of a project module that may keep what a caller
        gives it past the call (`ModuleFacts.may_keep_arguments`): where it is not, FileModel's
        imported_call finds nothing of the call's arguments kept. Nothing is parsed."""
        found = self._top_def(qualified)
        return found is not None and found.module.may_keep_arguments(found.name)

    def is_def(self, qualified: str) -> bool:
        """Whether `qualified` names a top-level def of a project module (read from its symbols,
        nothing parsed): a function, whatever its name suggests (`unwrap_model` is no module)."""
        return self._top_def(qualified) is not None

    def class_attribute(self, qualified_class: str, attribute: str):
        """What a top-level class of a project module (or a base of it there) declares an attribute
        to be, as that module's model reads its body; None when it declares nothing."""
        found = self.resolve(qualified_class)
        symbols = found.module.symbols if found is not None and found.name else None
        if symbols is None or not symbols.statements[found.name].is_class:
            return None
        model = found.module.model_for(found.name)
        return model.class_attribute(found.name, attribute) if model is not None else None

    def method(self, qualified_class: str, name: str) -> tuple[ModuleModel, cst.FunctionDef, object, ModuleFacts] | None:
        """A method of a top-level class of another module (its own or a base's of that module),
        with a model of that module and the class as the model describes it."""
        found = self.resolve(qualified_class)
        if found is None or not found.name:
            return None
        symbols = found.module.symbols
        if symbols is None or not symbols.statements[found.name].is_class:
            return None
        model = found.module.model_for(found.name)
        method = model.method_of(found.name, name) if model is not None else None
        if method is None:
            return None
        return model, method[0], method[1], found.module

    def where_defined(self, qualified: str) -> str | None:
        """`pkg/losses.py:12` for a top-level def or class of another module, for messages."""
        found = self.resolve(qualified)
        symbols = found.module.symbols if found is not None and found.name else None
        return found.module.where(symbols.statements[found.name]) if symbols is not None else None

    def method_line(self, qualified_class: str, name: str) -> str | None:
        """`pkg/utils/meters.py:8` for a method of another module's class, for messages: its
        `def` line inside the class's statement (the first, for a name defined twice)."""
        found = self.resolve(qualified_class)
        symbols = found.module.symbols if found is not None and found.name else None
        if symbols is None:
            return None
        statement = symbols.statements[found.name]
        self._note_part(found.module, f"text:{found.name}")
        lines = found.module.lines
        pattern = re.compile(rf"\s*(?:async\s+)?def\s+{re.escape(name)}\b")
        for number in range(statement.first, min(statement.last, len(lines)) + 1):
            if pattern.match(lines[number - 1]):
                return found.module.where(statement).rsplit(":", 1)[0] + f":{number}"
        return found.module.where(statement)

    def star_bindings(self, qualified_module: str) -> dict[str, str]:
        """What `from qualified_module import *` binds that names another thing: its imports'
        aliases (`nn` -> `torch.nn` from `import torch.nn as nn`) and its own top-level defs and
        classes. Names starting with `_` are not star-exported, unless `__all__` lists them."""
        module = self.module(qualified_module)
        if module is None:
            return {}
        self._note_part(module, "symbols")
        symbols = module.symbols
        if symbols is None:
            return {}
        exported = symbols.exported

        def public(name: str) -> bool:
            return name in exported if exported is not None else not name.startswith("_")

        bound = {name: target for name, target in symbols.aliases.items() if public(name)}
        for name in symbols.statements:
            if public(name):
                bound[name] = f"{qualified_module}.{name}"
        for star in symbols.stars:  # what it star-imported is in its namespace too
            if star != qualified_module and len(self._asking) < _MAX_HOPS:
                with self.asking(module):
                    for name, target in self.star_bindings(star).items():
                        if public(name):
                            bound.setdefault(name, target)
        return bound

    # ----- compiled extensions ------------------------------------------------------------------

    def native_float_atomic_add(self, name: str) -> tuple[NativeSum, str] | None:
        """The float atomic add a compiled extension's function `name` reaches in the C++ and CUDA
        sources of the checked file's project (native_sources), with its place for messages
        (`src/sampling_gpu.cu:42`, from the checked file's directory). None: none found, a top
        inside an installed package's directory, or too many sources or directories to read.
        The answer rests on every source read: an edit of any of them re-checks the file (a
        source added later is not looked for: the next run without the cache reads it)."""
        top = self._top
        if top is None or {"site-packages", "dist-packages"} & set(Path(top).parts):
            return None
        if top not in self._native:
            files = read_sources(top, self.max_bytes)
            self._native[top] = None if files is None else (
                NativeSources({path: data.decode("utf-8", "replace") for path, data in files.items()}),
                {path: bytes_digest(data) for path, data in files.items()}, {path: _stamp(path) for path in files})
        indexed = self._native[top]
        if indexed is None:
            return None
        sources, digests, _ = indexed
        for record in (self.consulted, *(asked.depends for asked in self._asking)):
            # once per record and file checked: a backward asks about every name it calls
            if (id(record), top) not in self._native_noted:
                self._native_noted.add((id(record), top))
                for path, digest in digests.items():
                    _merge(record, path, Reads("", digest, {NATIVE: bytes_digest(repr(digest).encode("utf-8"))}))
        found = sources.float_atomic_add(name)
        if found is None:
            return None
        return found, f"{os.path.relpath(found.path, self.anchor)}:{found.line}"

    # ----- modules ----------------------------------------------------------------------------

    def module(self, dotted: str) -> ModuleFacts | None:
        found = self._module_in(self._roots, dotted)
        if found is None and self.anchor not in self._roots:
            # Last, the checked file's own directory: run as a script (`python train.py`), Python
            # puts it first on sys.path, so `from models import LANDER` finds the sibling `models/`
            # even where an `__init__.py` makes the directory a package (DGL's examples/pytorch/
            # hilander). Kept apart from the roots, which many directories share (see __init__).
            found = self._module_in((self.anchor,), dotted)
        for directory in self._added:
            if found is not None:
                break
            if directory not in self._roots and directory != self.anchor:
                # Kept for the files of this directory: a module's facts hold paths for messages
                # relative to the first file that asked (Definition.where), and another file
                # finds the same module from elsewhere (`../models` here is `models` beside it).
                found = self._module_in((directory,), dotted, apart=self.anchor)
        return found

    def _module_in(self, roots: tuple[str, ...], dotted: str, apart: str = "") -> ModuleFacts | None:
        key = (roots, dotted, apart)
        if key in self._modules:
            found = self._modules[key]
        else:
            found = self._modules[key] = self._load(dotted, roots)
        self._note_absent(key, found)
        if found is not None:
            self._note(found)
        return found

    def _note_absent(self, key: tuple[tuple[str, ...], str, str], found: ModuleFacts | None) -> None:
        """The answer also rests on the places looked at before the module was found (all of them
        when it was not): a module created there later (or one deleted, then restored) would be
        found instead, so each is recorded as absent (`ResultCache` re-checks when it appears)."""
        absent = self._absent.get(key)
        if absent is None:
            absent = []
            for candidate in self._candidates(key[1], key[0]):
                path = os.path.abspath(candidate)
                if found is not None and path == found.path:
                    break
                absent.append((path, Reads(key[1], file_digest(path, self.max_bytes) or "", {ABSENT: ""})))
            self._absent[key] = absent
        for record in (self.consulted, *(asked.depends for asked in self._asking)):
            for path, reads in absent:
                _merge(record, path, reads)

    def _candidates(self, dotted: str, roots: tuple[str, ...]) -> list[str]:
        """Where `dotted` is looked for, in order: in each root, a module file, then a package."""
        relative = dotted.replace(".", os.sep)
        return [candidate for root in roots
                for candidate in (os.path.join(root, relative + ".py"), os.path.join(root, relative, "__init__.py"))]

    def _note(self, module: ModuleFacts) -> None:
        """The current file's findings (and the answers of the modules being asked) rest on this
        module's being there, and on every module its own answers rested on."""
        for record in (self.consulted, *(asked.depends for asked in self._asking)):
            _merge(record, module.path, Reads(module.dotted, module.digest, {}))
            for path, reads in list(module.depends.items()):
                _merge(record, path, reads)

    def _note_part(self, module: ModuleFacts, facet: str) -> None:
        """... and on this part of it (`ModuleFacts.part`)."""
        read = Reads(module.dotted, module.digest, {facet: module.part(facet)})
        for record in (self.consulted, *(asked.depends for asked in self._asking)):
            _merge(record, module.path, read)

    @contextmanager
    def asking(self, module: ModuleFacts):
        """While one of `module`'s answers is computed, what it reads is its dependency too."""
        self._asking.append(module)
        try:
            yield
        finally:
            self._asking.pop()
            self._note(module)

    def _load(self, dotted: str, roots: tuple[str, ...]) -> ModuleFacts | None:
        for candidate in self._candidates(dotted, roots):
            if os.path.isfile(candidate):
                stamp = _stamp(candidate)
                data = read_bytes(candidate, self.max_bytes)
                source = decode_source(data, self.max_bytes) if not isinstance(data, Unreadable) else data
                if isinstance(source, Unreadable):
                    return None
                facts = ModuleFacts(self, os.path.abspath(candidate), dotted, source, bytes_digest(data))
                facts.stamp = stamp
                return facts
        return None

    def _build_model(self, module: ModuleFacts, source: str, tree: cst.Module | None = None) -> ModuleModel | None:
        """The model of `source`, a module's kept statements; `tree`: their parse, when already put
        together from statements parsed before (ModuleFacts._kept_module)."""
        if self._build is None:
            return None
        self._under_way.add(module.dotted)
        try:
            if tree is None:
                tree = parse.parse(source)
            return self._build(tree, module.path, source, self)
        except Exception:  # noqa: BLE001 - a module we cannot read answers nothing; the checked file goes on
            return None
        finally:
            self._under_way.discard(module.dotted)


# The fields of a statement that hold statements (a handler's and a match case's body too).
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


class PrecheckAnswers:
    """The project as the prechecks of one checked file may ask it (prechecks.Elsewhere): what a
    call there reaches through the file's imports. The project is begun on the file at the first
    question only (a file whose prechecks ask nothing reads nothing of it), and what the answers
    read is the file's result's to depend on (`consulted`), as the analysis' reads are."""

    def __init__(self, path: str, tree: ast.Module, project_for: Callable[[str, ast.Module | None], "Project"]):
        self._path, self._tree, self._project_for = path, tree, project_for
        self.project: Project | None = None  # begun on the file: the analysis goes on with it
        self._imports: dict[str, set[str]] | None = None  # a name an import binds -> what it may name
        self._stars: list[str] = []
        self._star_bindings: list[dict[str, str]] = []
        self._answers: dict[str, bool] = {}

    def def_may_keep_arguments(self, written: str) -> bool:
        answer = self._answers.get(written)
        if answer is None:
            answer = self._answers[written] = any(
                self._begun().function_may_keep_arguments(qualified) for qualified in self._targets(written))
        return answer

    def def_text_holds(self, written: str, words: tuple[str, ...]) -> bool:
        key = f"{written}\0{words}"
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = any(
                self._begun().def_text_holds(qualified, words) for qualified in self._targets(written))
        return answer

    def _begun(self) -> Project:
        if self.project is None:
            self.project = self._project_for(self._path, self._tree)
        return self.project

    def _targets(self, written: str) -> list[str]:
        """What `written` may name, as FileModel qualifies a call: through an import anywhere in
        the file (a def's own `from .utils import remember` too; each, where two bind the name),
        and through what each module the file star-imports binds (project.star_bindings)."""
        if self._imports is None:
            dotted = self._begun().current
            package = dotted if os.path.basename(self._path) == "__init__.py" else dotted.rpartition(".")[0]
            self._imports, self._stars = {}, []
            statements = list(reversed(self._tree.body))
            while statements:  # imports are statements: no expression is walked
                node = statements.pop()
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    table = ImportTable(package or None)
                    table.add(_as_cst_import(node))
                    for local, target in table.aliases.items():
                        self._imports.setdefault(local, set()).add(target)
                    self._stars += table.stars
                else:
                    for field in reversed(_BLOCKS):
                        block = getattr(node, field, None)
                        if type(block) is list:
                            statements.extend(reversed(block))
            # What each star-imported module binds, read once for the file (not once per call asked).
            self._star_bindings = [self._begun().star_bindings(star) for star in self._stars]
        head, _, rest = written.partition(".")
        # An import binds the head, or a star import does: FileModel lets a later star import
        # rebind what an import bound, so both are asked.
        heads = set(self._imports.get(head, ()))
        for bindings in self._star_bindings:
            bound = bindings.get(head)
            if bound is not None:
                heads.add(bound)
        return sorted(f"{target}.{rest}" if rest else target for target in heads)


# The part a place looked at in vain is recorded with: the module must still be missing there (or
# unreadable), whatever its bytes.
ABSENT = "absent"
# The part a place of the project's layout is recorded with (an `__init__.py`, a project marker):
# "yes" or "no", whether it is there; only that was read of it.
EXISTS = "exists"
# The part a C++ or CUDA source of the project is recorded with (native_sources): its bytes.
NATIVE = "native"


def _merge(record: dict[str, Reads], path: str, reads: Reads) -> None:
    held = record.get(path)
    if held is None:
        record[path] = Reads(reads.dotted, reads.digest, dict(reads.parts))
        return
    if held.parts is not reads.parts:
        held.parts.update(reads.parts)
    if (reads.digest and not held.digest) or (reads.dotted and not held.dotted):
        # A place first recorded for its existence alone, then read as a module: its bytes count.
        record[path] = Reads(held.dotted or reads.dotted, held.digest or reads.digest, held.parts)


class Disk:
    """The project's files as they are now, each read at most once: whether what an answer read of
    a module (`Reads`) still reads the same, for a cached result (`ResultCache.get`) or a module
    kept by the editor (`Project.refresh`)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_bytes = max_bytes
        self._digests: dict[str, str] = {}
        self._modules: dict[tuple[str, str], ModuleFacts | None] = {}
        self._there: dict[str, bool] = {}

    def still_reads(self, path: str, reads: Reads) -> bool:
        there = reads.parts.get(EXISTS)
        if there is not None:
            if self._exists(path) != (there == "yes"):
                return False
            if len(reads.parts) == 1:  # only whether it is there was read
                return True
        digest = self._digests.get(path)
        if digest is None:
            digest = self._digests[path] = file_digest(path, self.max_bytes) or ""
        if digest == reads.digest:
            return True
        key = (path, reads.dotted)
        if key not in self._modules:
            self._modules[key] = self._module(path, reads.dotted)
        module = self._modules[key]
        if ABSENT in reads.parts:  # looked for in vain: good while it is still not there to read
            return module is None
        return module is not None and all(module.part(facet) == read for facet, read in reads.parts.items()
                                          if facet != EXISTS)

    def _exists(self, path: str) -> bool:
        there = self._there.get(path)
        if there is None:
            there = self._there[path] = os.path.exists(path)
        return there

    def _module(self, path: str, dotted: str) -> ModuleFacts | None:
        data = read_bytes(path, self.max_bytes)
        source = decode_source(data, self.max_bytes) if not isinstance(data, Unreadable) else data
        if isinstance(source, Unreadable):
            return None
        return ModuleFacts(None, path, dotted, source, bytes_digest(data))  # type: ignore[arg-type]
