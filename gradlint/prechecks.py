"""Cheap questions about CPython's `ast` tree, asked before paying for libcst.

Parsing with libcst costs about 10x CPython's parser; most files that mention `nn.Module` or
`autograd` hold no class or function a rule could report on. These answers are deliberately
loose (a yes only means "look closer"), never stricter than the rules.
"""

from __future__ import annotations

import ast
import functools
import weakref
from collections import deque
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, NamedTuple, Protocol

from gradlint.torch_api import CONTAINER_STORING_METHODS, PER_STEP_METHODS, TRAINING_ITERABLE, makes_a_step


# Fields no question here reads as code: contexts and operators (Load, Add, Eq: a quarter of a
# tree's nodes), names and numbers. ast.iter_child_nodes yields the first two kinds as children.
_NOT_CODE = frozenset({"ctx", "op", "ops", "id", "attr", "arg", "name", "module", "level", "kind",
                       "conversion", "is_async", "type_comment"})
_CODE_FIELDS: dict[type, tuple[str, ...]] = {}


def children(node: ast.AST) -> list[ast.AST]:
    """ast.iter_child_nodes without contexts and operators, in the same order: the prechecks
    walk every marked file's whole tree, and this halves what that walk visits."""
    fields = _CODE_FIELDS.get(type(node))
    if fields is None:
        fields = _CODE_FIELDS[type(node)] = tuple(f for f in node._fields if f not in _NOT_CODE)
    found: list[ast.AST] = []
    for field in fields:
        value = getattr(node, field, None)
        if isinstance(value, ast.AST):
            found.append(value)
        elif type(value) is list:
            found.extend(item for item in value if isinstance(item, ast.AST))
    return found


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk (breadth first, the same order) over children()."""
    todo = deque([node])
    while todo:
        node = todo.popleft()
        todo.extend(children(node))
        yield node


class Elsewhere(Protocol):
    """What a precheck may ask of the project around the file it is given (the engine answers,
    from the project index: no module is parsed with libcst to answer)."""

    def def_may_keep_arguments(self, written: str) -> bool:
        """Whether the call of `written` (`remember`, `utils.remember`, as the file spells it) may
        reach a def of another project module that keeps what it is given past the call."""
        ...

    def def_text_holds(self, written: str, words: tuple[str, ...]) -> bool:
        """Whether the call of `written` may reach a def of another project module whose own
        lines hold one of `words` (Project.def_text_holds)."""
        ...


# The project of the file being prechecked, set by the engine around its prechecks (None: a tree
# with no file, or a precheck called on its own: every such question is answered yes).
_elsewhere: ContextVar[Elsewhere | None] = ContextVar("gradlint_precheck_elsewhere", default=None)


@contextmanager
def asking(elsewhere: Elsewhere | None) -> Iterator[None]:
    """Prechecks run inside this answer their questions about other modules from `elsewhere`."""
    token = _elsewhere.set(elsewhere)
    try:
        yield
    finally:
        _elsewhere.reset(token)


def elsewhere_asked() -> Elsewhere | None:
    """The project the prechecks run now ask (a precheck that remembers an answer per tree keeps
    it for this one only)."""
    return _elsewhere.get()


def def_may_keep_arguments(written: str) -> bool:
    """Elsewhere.def_may_keep_arguments of the project the engine set; yes with none set."""
    elsewhere = _elsewhere.get()
    return elsewhere is None or elsewhere.def_may_keep_arguments(written)


def _per_tree(question: Callable[[ast.Module], object]):
    """Remember the answer for the last tree asked about: the engine asks every rule's precheck
    of one tree before the next, and several rules ask the same question."""
    last: list = [None, None]

    @functools.wraps(question)
    def ask(tree: ast.Module):
        if last[0] is None or last[0]() is not tree:
            last[0], last[1] = weakref.ref(tree), question(tree)
        return last[1]
    return ask


def _classes(tree: ast.Module) -> Iterator[ast.ClassDef]:
    stack: list = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.ClassDef):
            yield node
            stack.extend(node.body)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            stack.extend(children(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(node.body)


def _base_text(base: ast.expr) -> str:
    return ast.unparse(base) if not isinstance(base, ast.Name) else base.id


@_per_tree
def has_autograd_function(tree: ast.Module) -> bool:
    """A class with a base named like a Function (or any base, with forward and backward), or a
    register_autograd call."""
    aliases = {"Function"} | {
        alias.asname for node in _top_level_statements(tree) if isinstance(node, ast.ImportFrom)
        for alias in node.names if alias.asname and "Function" in alias.name}
    for cls in _classes(tree):
        bases = [_base_text(b) for b in cls.bases]
        methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if any(alias in base for base in bases for alias in aliases) or ({"forward", "backward"} <= methods and bases):
            return True
    return mentions_register_autograd(tree)


def mentions_register_autograd(tree: ast.Module) -> bool:
    """A register_autograd call as FileModel finds one: a statement of the module's top level
    (inside if/try/with/for blocks too), under any import name."""
    called = {last_name(statement.value.func) for statement in _top_level_statements(tree)
              if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)}
    return bool(called and names_imported_as(tree, "register_autograd") & called)


def _top_level_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement outside defs and classes."""
    stack: list = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(_blocks(node))


def _blocks(node: ast.stmt) -> list[ast.stmt]:
    inner = [*getattr(node, "body", ()), *getattr(node, "orelse", ()), *getattr(node, "finalbody", ())]
    for handler in getattr(node, "handlers", ()):
        inner.extend(handler.body)
    for case in getattr(node, "cases", ()):
        inner.extend(case.body)
    return inner


def stores_on_self_in(tree: ast.Module, method: str) -> bool:
    """A `method` of a class with bases, or a method it calls by name (of any class of the file,
    transitively: FileModel.runs_in_forward asks the same), that assigns to its first parameter's
    attributes, calls a container method or setattr on one, or declares a global."""
    by_name: dict[str, list[ast.FunctionDef]] = {}
    todo: list[ast.FunctionDef] = []
    for cls in _classes(tree):
        for function in cls.body:
            if isinstance(function, ast.FunctionDef):
                by_name.setdefault(function.name, []).append(function)
                if function.name == method and cls.bases:
                    todo.append(function)
    seen: set[int] = set()
    while todo:
        function = todo.pop()
        if id(function) in seen:
            continue
        seen.add(id(function))
        if function.args.args and _stores_on(function, function.args.args[0].arg):
            return True
        for node in walk(function):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else \
                    node.func.id if isinstance(node.func, ast.Name) else None
                if called not in (None, "__init__", method):
                    todo.extend(by_name.get(called, ()))
    return False


def _stores_on(function: ast.FunctionDef, owner: str) -> bool:
    for node in walk(function):
        if isinstance(node, ast.Global):
            return True
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_rooted_at(t, owner) for t in targets):
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in CONTAINER_STORING_METHODS and _rooted_at(node.func.value, owner):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == owner:
            return True
    return False


def _rooted_at(node: ast.expr, name: str) -> bool:
    if isinstance(node, (ast.Tuple, ast.List)):
        return any(_rooted_at(e, name) for e in node.elts)
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
        if isinstance(node, ast.Name):
            return node.id == name
    return False


_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class _Site(NamedTuple):
    call: ast.Call
    function: ast.AST | None  # innermost def around it
    loops: tuple  # the loops around it within that def, outermost first


def call_in_training_step(tree: ast.Module, wanted: Callable[[ast.Call], bool]) -> bool:
    """Whether a call `wanted` accepts may run once per training step, as
    call_sites.in_training_step decides on libcst's tree (kept in step with it): in a loop that
    also steps an optimizer or goes over a loader/dataset/epochs, or outside loops in a def that
    steps one outside any training loop of its own."""
    calls = _StepCalls(wanted)
    calls.visit(tree, None, ())
    wanted_sites, steps, backward_loops = calls.wanted_sites, calls.steps, calls.backward_loops
    for site in wanted_sites:
        if site.loops:
            if any(training_header(loop) or any(loop in s.loops for s in steps) for loop in site.loops):
                return True
        elif site.function is not None:
            # as FileModel.in_training_step: a forward or backward (of a Function or a Module) runs
            # every step, and so may a framework's per-step method (its name: the bases are not read)
            if getattr(site.function, "name", None) in _PER_STEP_NAMES:
                return True
            own = [s for s in steps if s.function is site.function]
            # `not any` below: a loop counts as training only where flow surely agrees
            if own and not any(id(loop) in backward_loops or _surely_training_header(loop)
                               for s in own for loop in s.loops):
                return True
    return False


_PER_STEP_NAMES = frozenset({"forward", "backward"}).union(*PER_STEP_METHODS.values())


class _StepCalls:
    """call_in_training_step's walk: the calls it wants, the optimizer steps, the loops that call
    backward. A method that calls itself, not a closure (a reference cycle: see call_sites._visit)."""

    def __init__(self, wanted: Callable[[ast.Call], bool]):
        self.wanted = wanted
        self.wanted_sites: list[_Site] = []
        self.steps: list[_Site] = []
        self.backward_loops: set[int] = set()

    def visit(self, node: ast.AST, function: ast.AST | None, loops: tuple) -> None:
        if isinstance(node, _FUNCTIONS):  # as call_sites: a def starts afresh, loops and all
            for decorator in node.decorator_list:
                self.visit(decorator, function, loops)
            for statement in node.body:
                self.visit(statement, node, ())
            return
        if isinstance(node, ast.Call):
            site = _Site(node, function, loops)
            func = node.func
            if self.wanted(node):
                self.wanted_sites.append(site)
            # as call_sites._steps_optimizer: an optimizer's step(), not zero_grad() alone
            if isinstance(func, ast.Attribute) and func.attr == "step" and makes_a_step(func.attr, dotted(func.value)):
                self.steps.append(site)
            if isinstance(func, ast.Attribute) and func.attr == "backward":
                self.backward_loops.update(id(loop) for loop in loops)
        if isinstance(node, _LOOPS):
            loops = (*loops, node)
        for child in children(node):
            self.visit(child, function, loops)


def _header(loop: ast.For | ast.AsyncFor | ast.While) -> ast.expr:
    return loop.test if isinstance(loop, ast.While) else loop.iter


def training_header(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """Whether flow may read the loop's header as a loop over a loader/dataset/epochs. flow reads
    the header's source text, comments included (`for b in (data  # epochs`); CPython's tree
    keeps none, so a header that may span several lines counts."""
    header = _header(loop)
    several_lines = header.end_lineno > loop.lineno or loop.body[0].lineno > loop.lineno + 1
    return several_lines or bool(TRAINING_ITERABLE.search(ast.unparse(header)))


def _surely_training_header(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """A header flow surely reads as a loop over a loader/dataset/epochs: a name in it says so, as
    the source spells it. ast.unparse joins `"data" "set"` and decodes escapes, and CPython
    normalises identifiers (`ｅpochs` is `epochs`): a name counts only where its source bytes
    are as many as its ASCII text's, so it is spelled the same."""
    return any(isinstance(n, ast.Name) and n.id.isascii() and n.end_lineno == n.lineno
               and n.end_col_offset - n.col_offset == len(n.id) and TRAINING_ITERABLE.search(n.id)
               for n in walk(_header(loop)))


def dotted(node: ast.expr) -> str | None:
    """As names.dotted does on libcst's tree: `a.b.c`, or None for anything but names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def last_name(node: ast.expr) -> str | None:
    """`a.b.c` -> "c", `c` -> "c"; None for anything else."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def calls_reaching(tree: ast.Module, names: set[str]) -> Callable[[ast.Call], bool]:
    """Which calls may run a function the file calls by one of `names` (its last name), as
    FileModel.runs_through decides, widened: a call so named, or of a plain name that is a def of the
    file calling one, or that may reach a def of another project module whose own lines name it."""
    wrappers = {node.name for node in walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and any(isinstance(c, ast.Call) and last_name(c.func) in names for c in walk(node))}
    words = tuple(names)

    def wanted(call: ast.Call) -> bool:
        func = call.func
        if last_name(func) in names:
            return True
        if not isinstance(func, ast.Name):
            return False
        elsewhere = _elsewhere.get()
        return func.id in wrappers or elsewhere is None or elsewhere.def_text_holds(func.id, words)
    return wanted


def names_imported_as(tree: ast.Module, name: str) -> set[str]:
    """`name` and what an import anywhere in the file renames it to (`from m import name as x`,
    `import m.name as x`): the names names.ImportTable.qualify turns into it."""
    return {name} | _renames(tree).get(name, set())


@_per_tree
def _renames(tree: ast.Module) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    stack: list = list(tree.body)  # statements only: imports are statements
    while stack:
        node = stack.pop()
        stack.extend(_blocks(node))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.asname:
                    found.setdefault(alias.name.rsplit(".", 1)[-1], set()).add(alias.asname)
    return found


def keyword_true_in_training_step(tree: ast.Module, keyword: str) -> bool:
    """Whether a call given `keyword=True` (any function: which one is not resolved here) may run
    once per training step (call_in_training_step)."""
    def given(call: ast.Call) -> bool:
        return any(k.arg == keyword and isinstance(k.value, ast.Constant) and k.value.value is True
                   for k in call.keywords)
    return call_in_training_step(tree, given)


def uses_class(tree: ast.Module, name: str) -> bool:
    """A call of class `name` under any import name, of its `__init__`, or a class deriving from it."""
    names = names_imported_as(tree, name)
    for node in walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if last_name(func) in names or (
                    isinstance(func, ast.Attribute) and func.attr == "__init__" and last_name(func.value) in names):
                return True
        elif isinstance(node, ast.ClassDef) and any(last_name(base) in names for base in node.bases):
            return True
    return False


def reads_attribute_in_defs(tree: ast.Module, attribute: str, defs: frozenset[str] | None) -> bool:
    """Whether a def named in `defs` (any def when None) reads `x.<attribute>` somewhere in it.
    Defs are statements: they are looked for among statements only (a def inside an expression
    is a lambda's, which has no name), and only a named def's whole tree is walked."""
    stack: list = list(tree.body)
    while stack:
        node = stack.pop()
        stack.extend(_blocks(node))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (defs is None or node.name in defs) \
                and any(isinstance(inner, ast.Attribute) and inner.attr == attribute for inner in walk(node)):
            return True
    return False
