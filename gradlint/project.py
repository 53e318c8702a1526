"""The project around a checked file: which of its imports are the project's own modules, and
what each of those says about a name (is `BaseModel` an nn.Module? does `compute_loss` return a
graph-attached tensor?).

Real training code splits one step over several files (the loss in `losses.py`, the model in
`models/`, a trainer base class), so a name imported from the project must carry the same facts
as one defined in the file. Each answer comes from the same analysis (`FileModel`) run on the
module that defines the name, on demand: nothing is parsed unless a checked file asks about it.
What a module cannot tell (a missing file, a syntax error, an import cycle, a name it does not
define) is unknown, never a guess and never a crash.

Every module consulted is recorded with the digest of its text (`consulted`): a cached result of
the checked file is valid only while each of them is unchanged, which is how a change to
`losses.py` re-checks the trainer that imports it and nothing else.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import libcst as cst

from gradlint.names import ImportTable
from gradlint.source import DEFAULT_MAX_BYTES, Unreadable, decode_source, read_bytes


class ModuleModel(Protocol):
    """What the project asks of a module's analysis (FileModel answers). Declared here so the
    project index depends on no model: the engine hands it a function that builds one."""

    functions: dict[str, cst.FunctionDef]
    top_level_classes: dict[str, cst.ClassDef]
    imports: ImportTable
    module_names: set[str]
    function_class_names: set[str]
    module_class_names: set[str]
    star_imports: list[str]
    exported_names: frozenset[str] | None

# Re-exports through `__init__` files and aliases chain; a longer chain than this is a cycle or
# something stranger, and stays unknown.
_MAX_HOPS = 8
# Parsed modules kept per process for the function questions; class answers are kept for all.
_MODELS_KEPT = 32
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


def module_name_of(path: str) -> tuple[str, str]:
    """The directory Python needs on sys.path to import the file, and the file's dotted name
    from there: up through the directories that hold an `__init__.py`."""
    file = Path(os.path.abspath(path))
    parts = [] if file.name == "__init__.py" else [file.stem]
    directory = file.parent
    while (directory / "__init__.py").is_file() and directory.parent != directory:
        parts.insert(0, directory.name)
        directory = directory.parent
    return str(directory), ".".join(parts)


def _project_top(start: str) -> str | None:
    directory = Path(start)
    for candidate in (directory, *directory.parents):
        if any((candidate / marker).exists() for marker in _PROJECT_MARKERS):
            return str(candidate)
    return None


@dataclass(frozen=True)
class ClassFacts:
    """What a class of another module is, as that module's own analysis decides it."""

    kind: str  # "module" (an nn.Module), "function" (an autograd Function), or "plain"
    where: str  # `models/base.py:12`, for messages


@dataclass(frozen=True)
class Definition:
    """A name resolved to the module that defines it."""

    module: "ModuleFacts"
    name: str


class ModuleFacts:
    """One module of the project, parsed once and asked on demand."""

    def __init__(self, project: "Project", path: str, dotted: str, source: str, digest: str):
        self.project = project
        self.path = path
        self.dotted = dotted
        self.source = source
        self.digest = digest  # of the file's bytes, as `file_digest` computes it
        self.stamp: tuple[int, int, int] | None = None  # the file's mtime, size and inode when read
        # The other modules this one's answers so far rested on (its bases' modules, its callees').
        self.depends: dict[str, str] = {}
        self._model: ModuleModel | None = None
        self._model_failed = False
        self._classes: dict[str, ClassFacts | None] = {}

    @property
    def package(self) -> str:
        """The package relative imports of this module start from."""
        if os.path.basename(self.path) == "__init__.py":
            return self.dotted
        return self.dotted.rpartition(".")[0]

    def model(self) -> ModuleModel | None:
        if self._model is None and not self._model_failed:
            if self.dotted in self.project._under_way:
                return None  # an import cycle back to a module being read: unknown from here
            with self.project.asking(self):
                self._model = self.project._build_model(self)
            self._model_failed = self._model is None
        return self._model

    def where(self, node: cst.CSTNode | None) -> str:
        line = 0
        if node is not None:
            # The def's own line: libcst has no cheap positions, so find its name in the text.
            keyword = "class " if isinstance(node, cst.ClassDef) else "def "
            name = getattr(getattr(node, "name", None), "value", "")
            for number, text in enumerate(self.source.splitlines(), 1):
                stripped = text.lstrip()
                if stripped.startswith(keyword + name) and stripped[len(keyword) + len(name):][:1] in ("(", ":", "["):
                    line = number
                    break
        relative = os.path.relpath(self.path, self.project.anchor) if self.project.anchor else self.path
        return f"{relative}:{line}" if line else relative


class Project:
    """The modules importable from the checked files' package roots and project top."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES,
                 build_model: Callable[[cst.Module, str, str, "Project"], ModuleModel] | None = None):
        self.max_bytes = max_bytes
        self._build = build_model
        self._roots: list[str] = []
        self._modules: dict[str, ModuleFacts | None] = {}  # dotted name -> facts (None: not the project's)
        self._models_kept: OrderedDict[str, None] = OrderedDict()
        self._under_way: set[str] = set()
        self._asking: list[ModuleFacts] = []
        self.calls_under_way = 0  # calls followed into other modules, nested (see FileModel.imported_call)
        self.anchor = ""  # the checked file's directory: where the names in messages start from
        # (path, digest) of every project module read for the current file.
        self.consulted: dict[str, str] = {}

    # ----- the file being checked -------------------------------------------------------------

    def begin(self, path: str) -> str:
        """Start on a checked file: its roots join the search path. Returns its dotted name."""
        root, dotted = module_name_of(path)
        roots = [root]
        top = _project_top(root)
        if top is not None:
            roots += [top, os.path.join(top, "src")]
        for candidate in roots:
            if candidate not in self._roots and os.path.isdir(candidate):
                self._roots.append(candidate)
                # A module once not found may be found under a new root.
                self._modules = {k: v for k, v in self._modules.items() if v is not None}
        self.anchor = os.path.dirname(os.path.abspath(path))
        self.consulted = {}
        self._under_way = {dotted}
        return dotted

    def refresh(self) -> None:
        """Forget the modules edited since they were read, and those whose answers rested on
        them: for a process that lives across edits (an editor's server). A batch run reads each
        module once and needs none of this."""
        stale = {path for path, module in self._loaded().items() if _stamp(path) != module.stamp}
        changed = bool(stale)
        while changed:
            changed = False
            for path, module in self._loaded().items():
                if path not in stale and stale.intersection(module.depends):
                    stale.add(path)
                    changed = True
        if stale:
            self._modules = {k: v for k, v in self._modules.items() if v is not None and v.path not in stale}

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
        model = module.model()
        if model is None:
            return None
        if name in model.functions or name in model.top_level_classes:
            return Definition(module, name)
        target = model.imports.aliases.get(name)
        if target is not None and target != name:
            return self.resolve(target, hops + 1)
        if name in model.module_names:
            return None  # bound here some other way (`Encoder = make_encoder()`): unknown
        for star in model.star_imports:
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
        module._classes[found.name] = None  # a class that inherits from itself through a cycle
        with self.asking(module):
            model = module.model()
        facts = None
        if model is not None and found.name in model.top_level_classes:
            node = model.top_level_classes[found.name]
            kind = ("function" if found.name in model.function_class_names else
                    "module" if found.name in model.module_class_names else "plain")
            facts = ClassFacts(kind, module.where(node))
        module._classes[found.name] = facts
        return facts

    def function(self, qualified: str) -> tuple[ModuleModel, cst.FunctionDef, ModuleFacts] | None:
        """A top-level def of another module, with that module's model to ask about it."""
        found = self.resolve(qualified)
        if found is None or not found.name:
            return None
        model = found.module.model()
        if model is None or found.name not in model.functions:
            return None
        function = model.functions[found.name]
        return model, function, found.module

    def star_bindings(self, qualified_module: str) -> dict[str, str]:
        """What `from qualified_module import *` binds that names another thing: its imports'
        aliases (`nn` -> `torch.nn` from `import torch.nn as nn`) and its own top-level defs and
        classes. Names starting with `_` are not star-exported."""
        module = self.module(qualified_module)
        model = module.model() if module is not None else None
        if model is None:
            return {}
        exported = model.exported_names
        bound = {name: target for name, target in model.imports.aliases.items()
                 if not name.startswith("_") and (exported is None or name in exported)}
        for name in (*model.functions, *model.top_level_classes):
            if not name.startswith("_") and (exported is None or name in exported):
                bound[name] = f"{qualified_module}.{name}"
        return bound

    # ----- modules ----------------------------------------------------------------------------

    def module(self, dotted: str) -> ModuleFacts | None:
        if dotted in self._modules:
            found = self._modules[dotted]
        else:
            found = self._modules[dotted] = self._load(dotted)
        if found is not None:
            self._note(found)
        return found

    def _note(self, module: ModuleFacts) -> None:
        """The current file's findings (and the answers of the modules being asked) rest on this
        module, and on every module its own answers rested on."""
        for record in (self.consulted, *(asked.depends for asked in self._asking)):
            record[module.path] = module.digest
            record.update(module.depends)

    @contextmanager
    def asking(self, module: ModuleFacts):
        """While one of `module`'s answers is computed, what it reads is its dependency too."""
        self._asking.append(module)
        try:
            yield
        finally:
            self._asking.pop()
            self._note(module)

    def _load(self, dotted: str) -> ModuleFacts | None:
        relative = dotted.replace(".", os.sep)
        for root in self._roots:
            for candidate in (os.path.join(root, relative + ".py"), os.path.join(root, relative, "__init__.py")):
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

    def _build_model(self, module: ModuleFacts) -> ModuleModel | None:
        if self._build is None:
            return None
        self._under_way.add(module.dotted)
        try:
            tree = cst.parse_module(module.source)
            model = self._build(tree, module.path, module.source, self)
        except Exception:  # noqa: BLE001 - a module we cannot read answers nothing; the checked file goes on
            return None
        finally:
            self._under_way.discard(module.dotted)
        self._models_kept[module.dotted] = None
        while len(self._models_kept) > _MODELS_KEPT:
            old, _ = self._models_kept.popitem(last=False)
            facts = self._modules.get(old)
            if facts is not None:
                facts._model, facts._model_failed = None, False
        return model
