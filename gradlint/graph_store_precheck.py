"""GL103/GL104's precheck: may this file keep anything past a training step?

It looks at targets only, never at values: a file passes when some function (or the module's top
level) has a store whose target may outlive the step, whatever it stores; whether the stored value
is graph-attached is the analysis' question alone (flow.py), asked once, on libcst's tree. So the
precheck can only let through more than the rules need, and no second evaluation of values has to
be kept in step with flow's.

Both rules report a value kept where it outlives the step, and flow.py settles that inside the one
function it walks (or the module's top level), never across functions: the target outlives the step
only when it is an attribute, a global or closure variable, a parameter (GL103 only) or a local
updated inside a training loop, or the receiver of a method call that is no local (flow's
KeptElsewhere: another module's method may keep what it is given, `tracker.record(loss)`), or a def
of another module the call reaches when the project says that def may keep what it is given
(`remember(loss)`: prechecks.def_may_keep_arguments, read from the project's symbols on CPython's
tree); GL104 also needs the new value to read its target (`total = total + loss`, or through a
local, `new = total + loss; total = new`: by the names read, as flow's reads go). Neither looks at a module's own attributes
in its forward (GL102 does). Values the rules never report are left out by their syntax alone:
literals, f-strings and comparisons (`self.n += 1`).

Measured when the value side (a flow-insensitive copy of flow's evaluation, about 600 lines) was
taken out, 2026-12-05, one process pinned to one core, CPU time, findings the same both ways (torch
10 lines, the real-world corpus' 11,548 files 422 lines):
- torch 2.13's 2,285 files: 110 files analysed before, 221 after (39 and 171 of them for GL103/104),
  the analysis 12.0 s before and 21.5 s after (22.0 s without a chained store's reads of its target,
  234 files);
- the real-world corpus: 173.8 s before and 195.6 s after (+12.6%, without those reads).
Of the 183 torch files that pass on a store of the file's own, every kind of target is common (a
method call's receiver in 155, a container in 132, a chained attribute in 128, a chained local in a
loop flow may read as training in 96). A gate that reads values syntactically, by the sources flow
knows (a module call, a parameter, a backward, a def of the file that returns something), still lets
193 of torch's files through and saves 1 of the 9.7 s; one that also keeps the copy's value tracing
lets 61 through. Parsing with libcst only the statements such a file's stores can need does not pay
either: their name closure is 82-94% of the lines of the files concerned (measured 2026-12-05 on
torch).

Known gap: flow reads a loop header's text with its comments, CPython's tree keeps none; a header
over several lines counts as a training loop here, except one whose body starts on the header's
last line (`for b in (data  # epochs\n): total += loss`).
"""

from __future__ import annotations

import ast
import weakref
from functools import cached_property
from typing import Iterator, NamedTuple

from gradlint.prechecks import children, def_may_keep_arguments, dotted as _dotted, elsewhere_asked, training_header
from gradlint.torch_api import (CONTAINER_STORING_METHODS, FUNCTION_BASES, is_module_base, makes_a_step,
                                steps_a_simulator)


def may_store_across_steps(tree: ast.Module) -> bool:
    """Whether some function (or the top level) may store something where it outlives the step.
    A no means neither GL103 nor GL104 can report anything in the file."""
    global _last_answer
    asked = id(elsewhere_asked())  # the answer rests on the project asked too
    if _last_answer is None or _last_answer[0]() is not tree or _last_answer[1] != asked:
        facts = _FileFacts(tree)
        try:
            _last_answer = (weakref.ref(tree), asked, facts.may_keep_past_step())
        finally:
            facts.release()
    return _last_answer[2]


# GL103 and GL104 ask of the same tree one after the other: the second gets the first's answer.
_last_answer: tuple[weakref.ref, int, bool] | None = None


# What a store site keeps, for the function it is in (see _Scope.store_outlives_step).
_CONTAINER = "container"  # x.append(v), x[k] = v: the target is the container x
_AUGMENTED_NAME = "augmented name"  # total += v
_AUGMENTED_ATTRIBUTE = "augmented attribute"  # self.total += v, self.buf += [v]
_CHAINED_NAME = "chained name"  # total = <reads total>
_CHAINED_ATTRIBUTE = "chained attribute"  # self.h = <reads self.h>
_SETATTR = "setattr"  # setattr(self, "h", <reads self.h>)
_METHOD_CALL = "method call"  # tracker.record(v): another module's method may keep v in its receiver
_IMPORTED_DEF = "imported def"  # remember(v), utils.remember(v): another module's def may keep v there


# Values flow.py never finds graph-attached: literals, f-strings, comparisons (`self.n += 1`).
_NEVER_GRAPH = frozenset({ast.Constant, ast.JoinedStr, ast.Compare})
# Receivers made afresh by their own syntax (`", ".join(parts)`, `[a].extend(b)`): nothing outlives the call.
_LITERALS = frozenset({ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp,
                       ast.SetComp, ast.DictComp, ast.GeneratorExp})


class _Site(NamedTuple):
    """One store a rule may report, as the pass finds it."""

    kind: str
    target: ast.AST | str
    loops: tuple[ast.stmt, ...]
    value: ast.expr | None = None  # a chained store's new value, which must read its target


class _Class:
    def __init__(self, name: str, bases: list[str]):
        self.name = name
        self.bases = bases  # qualified as FileModel does: with the imports read before the class

    def inherits_from_elsewhere(self, facts: _FileFacts) -> bool:
        """Whether a base is not this file's nor torch's: flow follows `super().m()` into another
        module of the project (FileModel.imported_inherited_method)."""
        return any(base and base not in facts.class_names and base != "object" and not base.startswith("torch.")
                   for base in self.bases)


class _Scope:
    """What one function (or the module's top level) holds, in the terms flow.py decides by."""

    def __init__(self, node: ast.AST, owner: _Class | None):
        self.node = node
        self.owner = owner  # the class the def is directly in
        # Names the function binds itself (prescan's assigned and augmented): its locals.
        self.bound: set[str] = set()
        self.declared: set[str] = set()  # global or nonlocal
        self.loads: set[str] = set()
        self.attribute_loads: set[str] = set()  # `x.total` read: "total"
        self.sites: list[_Site] = []
        self.step_loops: set[int] = set()  # loops that call backward/step/zero_grad
        self._loop_headers: dict[int, bool] = {}  # loops whose header names a loader, an epoch, ...

    def keeps_past_step(self, facts: _FileFacts) -> bool:
        return any(site.kind != _IMPORTED_DEF and self.store_outlives_step(site, facts) and self._reads_own_target(site)
                   for site in self.sites)

    def _reads_own_target(self, site: _Site) -> bool:
        """For a chained store, whether its new value may read what it replaces, by the names it
        reads, directly or through the function's bindings of them (`new = self.h + x; self.h =
        new`), as flow's reads go: names only, no value is evaluated. Other stores need not."""
        if site.kind == _CHAINED_NAME:
            target = site.target
        elif site.kind == _CHAINED_ATTRIBUTE:
            target = _dotted(site.target)
        elif site.kind == _SETATTR:
            target = f"{_dotted(site.target.args[0])}.{site.target.args[1].value}"
        else:
            return True
        seen: set[str] = set()
        todo = [site.value]
        while todo:
            names = _read_names(todo.pop())
            if target in names:
                return True
            for name in names - seen:
                seen.add(name)
                todo.extend(self.values_of.get(name, ()))
        return False

    @cached_property
    def values_of(self) -> dict[str, list[ast.expr]]:
        """What each name or dotted attribute is bound to in the function's own body."""
        found: dict[str, list[ast.expr]] = {}
        for targets, value in _bindings(self.node):
            for target in targets:
                found.setdefault(target, []).append(value)
        return found

    def passes_to_a_keeping_def(self, facts: _FileFacts) -> bool:
        """A call of another module's def that keeps what it is given, as the project says (it may
        read that module): asked only once no store of the file outlives the step."""
        return any(site.kind == _IMPORTED_DEF and facts.from_elsewhere(site.target.partition(".")[0], site.target)
                   and def_may_keep_arguments(site.target) for site in self.sites)

    def store_outlives_step(self, site: _Site, facts: _FileFacts) -> bool:
        kind, target, loops = site.kind, site.target, site.loops
        if kind == _METHOD_CALL:  # flow's KeptElsewhere: the receiver's, an instance of another module's class
            return self._receiver_may_keep(target, loops, facts)
        if kind == _CONTAINER:
            if isinstance(target, ast.Name):
                return self._name_outlives(target.id, loops, param_outlives=True)
            owner = _dotted(target)
            return owner is not None and not self._own_attribute_in_forward(owner.split(".")[0], facts)
        if kind == _AUGMENTED_ATTRIBUTE:
            return not self._own_attribute_in_forward(_dotted(target.value), facts)
        if kind == _AUGMENTED_NAME:
            return self._name_outlives(target, loops, param_outlives=False)
        if kind == _CHAINED_NAME:
            return target in self.loads and self._name_outlives(target, loops, param_outlives=False)
        if kind == _CHAINED_ATTRIBUTE:
            owner = _dotted(target.value)
            return owner is not None and target.attr in self.attribute_loads \
                and not self._own_attribute_in_forward(owner, facts)
        # setattr(owner, "name", value): flow knows the attribute only from a plain string.
        args = target.args
        return _dotted(args[0]) is not None and _is_text(args[1]) and args[1].value in self.attribute_loads

    def _receiver_may_keep(self, receiver: ast.expr, loops: tuple[ast.stmt, ...], facts: _FileFacts) -> bool:
        """Whether `receiver.m(v)` may keep v past the step in the receiver, as flow's KeptElsewhere
        does for an instance of another module's class (whatever the receiver's shape), and for
        `super().m(v)` with a base of another module. Never: a literal, the method's own self (flow
        walks a method of the class itself, whose stores are sites there), a module `import` bound
        and never rebound at the top level (`np.stack(xs)`; a def of another module is an
        _IMPORTED_DEF site), what torch's namespace holds (`torch.nn.functional.relu(x)`), or a
        local not carried across the steps. flow knows a value for such an instance only from a
        call in this file of a name imported from elsewhere (`Meter()`, `utils.make_meter()`:
        FileModel.imported_call, _project_instance): a file with none has no receiver to ask about."""
        if type(receiver) in _LITERALS:
            return False
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
            return self.owner is not None and self.owner.inherits_from_elsewhere(facts)
        if not facts.calls_elsewhere:
            return False  # flow's instances of another module's class all come from such a call
        if isinstance(receiver, ast.Call):
            return True
        head = receiver
        while isinstance(head, ast.Attribute):
            head = head.value
        if not isinstance(head, ast.Name) or head.id in self.bound or head.id in self.params:
            return not isinstance(receiver, ast.Name) or (
                receiver.id != self.self_name and self._name_outlives(receiver.id, loops, param_outlives=True))
        if head.id not in facts.scopes[0].bound and (
                head.id in facts.torch_names or (head is receiver and head.id in facts.imported_modules)):
            return False  # `meter = meter.Meter()` at the top level: an instance after all
        return not isinstance(receiver, ast.Name) or self._name_outlives(receiver.id, loops, param_outlives=True)

    def _name_outlives(self, name: str, loops: tuple[ast.stmt, ...], param_outlives: bool) -> bool:
        if name in self.declared:
            return True
        if name in self.params and param_outlives:
            return True  # GL103: the caller's list
        # GL104: a parameter rebound here is a local (the caller's total is the caller's)
        if name in self.bound or name in self.params or isinstance(self.node, ast.Module):
            return any(self._is_step_loop(loop) for loop in loops)
        return True  # a global or a closure variable

    def _is_step_loop(self, loop: ast.stmt) -> bool:
        if id(loop) in self.step_loops:
            return True
        found = self._loop_headers.get(id(loop))
        if found is None:
            found = self._loop_headers[id(loop)] = training_header(loop)
        return found

    def _own_attribute_in_forward(self, owner: str | None, facts: _FileFacts) -> bool:
        """A module's forward storing on its own self: GL102's to report, not GL103's or GL104's."""
        return owner is not None and owner == self.self_name and self.node.name == "forward" \
            and self.owner.name in facts.module_class_names

    @cached_property
    def params(self) -> set[str]:
        if isinstance(self.node, ast.Module):
            return set()
        arguments = self.node.args
        names = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
        return names | {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}

    @cached_property
    def self_name(self) -> str | None:
        """The first parameter of a method, as FileModel names it (posonly ones not counted)."""
        if self.owner is None or not self.node.args.args:
            return None
        if any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in self.node.decorator_list):
            return None
        return self.node.args.args[0].arg


class _FileFacts:
    """One pass over the file: each function's stores, the imports, the classes."""

    def __init__(self, tree: ast.Module):
        self.aliases: dict[str, str] = {}
        self.foreign: set[str] = set()  # names from-imported from outside torch ("*": a star import)
        self.imported_modules: set[str] = set()  # names an `import x` binds: a module, never an instance
        self.torch_names: set[str] = set()  # names bound to torch or one of its modules
        self._called_heads: set[str] = set()  # the first name of each call's function (`utils` of `utils.f(x)`)
        self.classes: list[_Class] = []
        self.scopes: list[_Scope] = [_Scope(tree, None)]
        self._owner: _Class | None = None  # the class whose body is being read
        self._children(tree, self.scopes[0], ())

    def may_keep_past_step(self) -> bool:
        # The project is asked last: a store of the file's own answers most files without reading another.
        return any(scope.keeps_past_step(self) for scope in self.scopes) \
            or any(scope.passes_to_a_keeping_def(self) for scope in self.scopes)

    def release(self) -> None:
        """Drop the scopes, which hold the file's tree: the tree goes with the engine's last use of
        it, not at the cyclic collector's next pass (tests/test_reference_cycles.py checks it)."""
        self.classes.clear()
        self.scopes.clear()

    def qualify(self, name: str) -> str:
        """As names.ImportTable.qualify does."""
        head, _, rest = name.partition(".")
        full = self.aliases.get(head, head)
        return f"{full}.{rest}" if rest else full

    def from_elsewhere(self, head: str, name: str) -> bool:
        """Whether `name` (headed `head` as written) may come from another module than torch: its
        head imported from one, or, with a star import, bound by it (a star-imported module's own
        import too: `utils.remember` where it did `from app import utils`)."""
        return head in self.foreign or "*" in self.foreign

    @cached_property
    def calls_elsewhere(self) -> bool:
        """Whether the file calls a name that may come from another module than torch (asked once
        the whole file is read: an import may come after the call)."""
        return "*" in self.foreign or not self._called_heads.isdisjoint(self.foreign)

    @cached_property
    def class_names(self) -> set[str]:
        return {cls.name for cls in self.classes}

    @cached_property
    def module_class_names(self) -> set[str]:
        """As FileModel._classify decides, by name: a class whose bases reach nn.Module (or
        Lightning's) in this file, unless they also reach an autograd Function."""
        functions: set[str] = set()
        modules: set[str] = set()
        changed = True
        while changed:
            changed = False
            for cls in self.classes:
                if cls.name not in functions and any(b in FUNCTION_BASES or b in functions for b in cls.bases):
                    functions.add(cls.name)
                    changed = True
                if cls.name not in modules and any(is_module_base(b) or b in modules for b in cls.bases):
                    modules.add(cls.name)
                    changed = True
        return modules - functions

    # ----- the pass ---------------------------------------------------------------------------------

    def _visit(self, node: ast.AST, scope: _Scope, loops: tuple[ast.stmt, ...]) -> None:
        handler = _HANDLERS.get(type(node))
        if handler is None:
            self._children(node, scope, loops)
        else:
            handler(self, node, scope, loops)

    def _children(self, node: ast.AST, scope: _Scope, loops: tuple[ast.stmt, ...]) -> None:
        for child in children(node):
            handler = _HANDLERS.get(type(child))
            if handler is None:
                self._children(child, scope, loops)
            else:
                handler(self, child, scope, loops)

    def _skip(self, node: ast.AST, scope: _Scope, loops) -> None:
        """Nothing under it counts: contexts, constants, and lambdas (flow does not walk them)."""

    def _name(self, node: ast.Name, scope: _Scope, loops) -> None:
        if type(node.ctx) is ast.Load:
            scope.loads.add(node.id)
        elif type(node.ctx) is ast.Store:
            scope.bound.add(node.id)

    def _attribute(self, node: ast.Attribute, scope: _Scope, loops) -> None:
        if type(node.ctx) is ast.Load:
            scope.attribute_loads.add(node.attr)
        self._visit(node.value, scope, loops)

    def _call(self, node: ast.Call, scope: _Scope, loops) -> None:
        func = node.func
        stored = any(type(value) not in _NEVER_GRAPH for value in (*node.args, *(k.value for k in node.keywords)))
        if isinstance(func, ast.Attribute):
            method = func.attr
            if makes_a_step(method, _dotted(func.value)):
                scope.step_loops.update(map(id, loops))
            elif method == "step" and steps_a_simulator(_dotted(func.value)) and loops:
                scope.step_loops.add(id(loops[-1]))  # a rollout keeps what it stores per env step too
            if stored:
                scope.sites.append(_Site(_CONTAINER if method in CONTAINER_STORING_METHODS else _METHOD_CALL,
                                         func.value, loops))
        elif isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 3 \
                and type(node.args[2]) not in _NEVER_GRAPH:
            scope.sites.append(_Site(_SETATTR, node, loops, node.args[2]))
        head = func
        while isinstance(head, ast.Attribute):
            head = head.value
        if isinstance(head, ast.Name):
            self._called_heads.add(head.id)
        name = _dotted(func) if stored else None
        if name is not None:
            # `remember(loss)`, `utils.remember(loss)`: maybe a def of another module, which may
            # keep it there. Whether the name is imported is asked once the whole file is read (an
            # import may come after the call); capitalized or not (`import remember as Remember`:
            # FileModel.imported_call tells a class by the name it resolves to).
            scope.sites.append(_Site(_IMPORTED_DEF, name, loops))
        self._children(node, scope, loops)

    def _assign(self, node: ast.Assign | ast.AnnAssign, scope: _Scope, loops) -> None:
        if node.value is None:  # `x: int` binds nothing
            return
        if type(node.value) not in _NEVER_GRAPH:
            for target in node.targets if isinstance(node, ast.Assign) else (node.target,):
                self._store(target, node.value, scope, loops)
        self._children(node, scope, loops)

    def _store(self, target: ast.expr, value: ast.expr, scope: _Scope, loops) -> None:
        if isinstance(target, ast.Name):
            scope.sites.append(_Site(_CHAINED_NAME, target.id, loops, value))
        elif isinstance(target, ast.Attribute):
            scope.sites.append(_Site(_CHAINED_ATTRIBUTE, target, loops, value))
        elif isinstance(target, ast.Subscript):
            scope.sites.append(_Site(_CONTAINER, target.value, loops))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._store(element, value, scope, loops)
        elif isinstance(target, ast.Starred):
            self._store(target.value, value, scope, loops)

    def _augmented(self, node: ast.AugAssign, scope: _Scope, loops) -> None:
        target = node.target
        if type(node.value) not in _NEVER_GRAPH:  # `self.n += 1`: the usual case, never a graph
            if isinstance(target, ast.Name):
                # flow makes `bank += [h]` (a value it reads as a container) an extend: either may hold
                scope.sites.append(_Site(_AUGMENTED_NAME, target.id, loops))
                scope.sites.append(_Site(_CONTAINER, target, loops))
            elif isinstance(target, ast.Attribute):
                scope.sites.append(_Site(_AUGMENTED_ATTRIBUTE, target, loops))
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):  # epoch_loss[0] += loss
                scope.sites.append(_Site(_AUGMENTED_NAME, target.value.id, loops))
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):  # self.stats[k] += v
                scope.sites.append(_Site(_AUGMENTED_ATTRIBUTE, target.value, loops))
        self._children(node, scope, loops)

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While, scope: _Scope, loops) -> None:
        # The header and the else block count as inside: prescan marks step loops that way.
        self._children(node, scope, (*loops, node))

    def _comprehension(self, node: ast.comprehension, scope: _Scope, loops) -> None:
        # Its target is no local of the function: prescan does not count it either.
        self._visit(node.iter, scope, loops)
        for condition in node.ifs:
            self._visit(condition, scope, loops)

    def _declaration(self, node: ast.Global | ast.Nonlocal, scope: _Scope, loops) -> None:
        scope.declared.update(node.names)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: _Scope, loops) -> None:
        # Decorators and defaults belong to no walk; the body is a scope of its own.
        function = _Scope(node, self._owner)
        self.scopes.append(function)
        owner, self._owner = self._owner, None
        for statement in node.body:
            self._visit(statement, function, ())
        self._owner = owner

    def _class(self, node: ast.ClassDef, scope: _Scope, loops) -> None:
        bases = []
        for base in node.bases:
            name = _dotted(base.value if isinstance(base, ast.Starred) else base)  # libcst keeps `*mixins` a name
            bases.append(self.qualify(name) if name is not None else "")
        cls = _Class(node.name, bases)
        self.classes.append(cls)
        # A class body is walked by no rule: its statements feed a scope nobody asks about.
        owner, self._owner = self._owner, cls
        body = _Scope(node, None)
        for statement in node.body:
            self._visit(statement, body, ())
        self._owner = owner

    def _import(self, node: ast.Import, scope: _Scope, loops) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name.partition(".")[0]
            self.imported_modules.add(bound)
            if alias.name == "torch" or alias.name.startswith("torch."):
                self.torch_names.add(bound)
            else:
                # `import app.losses as L`: may be the project's, as a name from-imported may be
                self.foreign.add(bound)
            if alias.asname is not None:
                self.aliases[alias.asname] = alias.name
            else:
                head = alias.name.split(".")[0]
                self.aliases.setdefault(head, head)

    def _import_from(self, node: ast.ImportFrom, scope: _Scope, loops) -> None:
        module = node.module or ""
        if not node.level and (module == "torch" or module.startswith("torch.")):
            self.torch_names |= {alias.asname or alias.name for alias in node.names}
        else:
            # Another module's names (the project's, or a library's): FileModel asks the project
            # what they are (Project.class_facts, FileModel.imported_call); here they may be anything.
            self.foreign |= {alias.asname or alias.name for alias in node.names}
        if node.level or any(alias.name == "*" for alias in node.names):
            return
        for alias in node.names:
            local = alias.asname or alias.name
            self.aliases[local] = f"{node.module}.{alias.name}" if node.module else alias.name


_HANDLERS = {
    ast.Load: _FileFacts._skip, ast.Store: _FileFacts._skip, ast.Del: _FileFacts._skip,
    ast.Constant: _FileFacts._skip, ast.Lambda: _FileFacts._skip,
    ast.Name: _FileFacts._name,
    ast.Attribute: _FileFacts._attribute,
    ast.Call: _FileFacts._call,
    ast.Assign: _FileFacts._assign, ast.AnnAssign: _FileFacts._assign,
    ast.AugAssign: _FileFacts._augmented,
    ast.For: _FileFacts._loop, ast.AsyncFor: _FileFacts._loop, ast.While: _FileFacts._loop,
    ast.comprehension: _FileFacts._comprehension,
    ast.Global: _FileFacts._declaration, ast.Nonlocal: _FileFacts._declaration,
    ast.FunctionDef: _FileFacts._function, ast.AsyncFunctionDef: _FileFacts._function,
    ast.ClassDef: _FileFacts._class,
    ast.Import: _FileFacts._import, ast.ImportFrom: _FileFacts._import_from,
}


def _read_names(value: ast.expr) -> set[str]:
    """The names and dotted attribute chains an expression reads (lambdas left out, as flow)."""
    names: set[str] = set()
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(_dotted(node))
        stack.extend(children(node))
    names.discard(None)
    return names


def _bindings(function: ast.AST) -> Iterator[tuple[set[str], ast.expr]]:
    """(names and dotted attributes bound, the value) for each binding in the function's own body:
    assignments, loop and comprehension targets, `with ... as`, `:=`."""
    stack = list(children(function)) if isinstance(function, ast.Module) else list(function.body)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in _NESTED_SCOPES:
            continue
        if kind is ast.Assign:
            for target in node.targets:
                yield _bound_names(target), node.value
        elif kind is ast.AugAssign:
            yield _bound_names(node.target), node.value
        elif (kind is ast.AnnAssign and node.value is not None) or kind is ast.NamedExpr:
            yield _bound_names(node.target), node.value
        elif kind in (ast.For, ast.AsyncFor, ast.comprehension):
            yield _bound_names(node.target), node.iter
        elif kind is ast.withitem and node.optional_vars is not None:
            yield _bound_names(node.optional_vars), node.context_expr
        stack.extend(children(node))


_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _bound_names(target: ast.expr) -> set[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound_names(e) for e in target.elts))
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    name = target.id if isinstance(target, ast.Name) else _dotted(target)
    return {name} if name is not None else set()


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)
