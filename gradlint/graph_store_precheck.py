"""GL103/GL104's precheck: may this file keep a graph-attached value past a training step?

Both rules report a graph-attached value kept where it outlives the step, and flow.py settles
both halves inside the one function it walks (or the module's top level), never across them:
- the target outlives the step only when it is an attribute, a global or closure variable, a
  parameter (GL103 only) or a local updated inside a training loop, or the receiver of a method
  call when it may be an instance of another module's class (flow's KeptElsewhere: that method
  may keep what it is given, `tracker.record(loss)`; the instance made in the function, put on
  self by __init__, or bound at the module's top level, `TRACKER = utils.Tracker()`); GL104
  also needs the new value to read its target (`total = total + loss`, or through a local), and
  neither looks at a module's own attributes in its forward (GL102 does);
- the value is graph-attached only when that function computes it from a module call (a name,
  attribute or parameter named like a module, a torch.nn class, a module class of the file, or
  in a module class's method what its __init__ put on self, or an instance of a module class
  of the file bound at the top level), an nn.Parameter used in an op, a name backward() is
  called on, what a method stored on self read back from such an instance, or what a def of
  the file returns (flow walks it with the call's arguments: here, a def that makes such a
  value itself or through another, or one given one); another module's def gives a graph only
  when given one or a module (FileModel.imported_call walks it then: `compute_loss(model, x, y)`),
  and its class (capitalized) an instance that may be a module or the project's.
The first pass collects every function's stores and cheap facts; only a function with a store
that outlives the step and some source of graph-attached values gets its values traced
(_GraphValues, flow's evaluation widened to "may"). Torch 2.13's own sources: 26 of the 200
files with GL103's markers pass it (2026-12-04; it has been widened since it let 1 through). Of
the files with either rule's markers, 27 passed and 34 pass since it reads other modules' names
as flow does (three cross-file findings it dropped: tests/fixtures/projects/gated, which
test_project checks against a run without prechecks). bench/crossfile_fuzz.py generates 570
two-module projects (a loop, and what it keeps its loss with in another module; 195 more for
GL102 and GL101) and lints each both ways, with no difference. The last one it showed, a def of
another module keeping its argument in its own module's global (`remember(loss)`), is a call site
whose keeping the project answers (prechecks.def_may_keep_arguments: the def, or what it names of
its module, has a store by its symbols on CPython's tree); taking every such call instead would
have let torch's 51 files pass, the corpus' 922 of 1,688; asked, 39 and 649 (34 and 515 before).
Five shapes a review found it missing are test_project's (a global handed to a helper, an import
after the call, a capitalized alias, star imports).
Keep _GraphValues in step with flow.py: a source of graph-attached values it does not know drops
findings (tests/test_prechecks.py runs the corpus and that bench).
Why a second evaluation and not a syntactic gate (measured 2026-12-04, torch 2.13's 2,285 files, one
process, CPU time): with this precheck 42 s and 98 files analysed; with only the first pass (some
store outlives the step) 79 s and 222 files; with that and may_make_graph 63 s and 158 files; the
findings were the same. Parsing with libcst only the top-level statements with such a store and
their name closure (callees and callers) would keep 167k of the 177k def and class lines of the
146 files concerned. A gate that is conservative by construction therefore costs 1.5-1.9x the
cold run, where the cold run must not get slower. Measured again 2026-12-05 on 9d603e6, after the
cold run got faster: the first pass with may_make_graph read syntactically (no _GraphValues
anywhere) lets 167 of torch's 204 files with the markers through against 39, and the cold run
takes 34.8 s of CPU against 27.6 s (+26%, two alternated one-core runs, the same 10 findings);
the name closure of those files' flagged statements is still 82% of their lines (86% with their
callers), so parsing only it with libcst would not pay for it either.
Known gap: flow reads a loop header's text with its comments, CPython's tree keeps none; a
header over several lines counts as a training loop here, except one whose body starts on the
header's last line (`for b in (data  # epochs\n): total += loss`).
"""

from __future__ import annotations

import ast
import weakref
from functools import cached_property, lru_cache
from typing import Iterator, NamedTuple

from gradlint.torch_api import is_module_base
from gradlint.prechecks import (children, def_may_keep_arguments, dotted as _dotted, elsewhere_asked, training_header,
                                walk)
from gradlint.flow import looks_like_module
from gradlint.torch_api import (CHECKPOINT_FUNCTIONS, CONTAINER_STORING_METHODS, FORWARD_HOOK_REGISTRATIONS, DETACHED_ATTRIBUTES, DETACHING_METHODS, FUNCTION_BASES,
                                MODULE_ONLY_METHODS, MODULE_RETURNING_METHODS, NN_NOT_MODULES, PARAMETER_CONSTRUCTORS, SCALAR_METHODS,
                                VIEW_ATTRIBUTES, is_distribution, is_nn_module_class, is_tensor_op,
                                makes_a_step, steps_a_simulator)


def may_store_across_steps(tree: ast.Module) -> bool:
    """Whether some function (or the top level) may store a graph-attached value where it
    outlives the step. A no means neither GL103 nor GL104 can report anything in the file."""
    global _last_answer
    asked = id(elsewhere_asked())  # the answer rests on the project asked too
    if _last_answer is None or _last_answer[0]() is not tree or _last_answer[1] != asked:
        facts = _FileFacts(tree)
        try:
            _last_answer = (weakref.ref(tree), asked, any(scope.may_keep_graph(facts) for scope in facts.scopes))
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


class _Site(NamedTuple):
    """One store a rule may report, as the first pass finds it."""

    kind: str
    target: ast.AST | str
    values: tuple[ast.expr, ...]  # what is stored (every argument of a container method)
    loops: tuple[ast.stmt, ...]
    unpacked: bool = False  # the target gets one element of the value: `a, self.h = pair`


_AUTOGRAD_CALLS = ("torch.autograd.", "autograd.")


@lru_cache(maxsize=4096)
def _module_like(name: str) -> bool:
    """looks_like_module runs two regexes; the same few thousand names come back in every file."""
    return looks_like_module(name)


class _Class:
    def __init__(self, name: str, bases: list[str]):
        self.name = name
        self.bases = bases  # qualified as FileModel does: with the imports read before the class
        self.methods: dict[str, _Scope] = {}

    def inherits_from_elsewhere(self, facts: _FileFacts) -> bool:
        """Whether a base is not this file's nor torch's: flow follows `super().m()` into another
        module of the project (FileModel.imported_inherited_method); widened: any such base."""
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
        self.called: list[ast.expr] = []  # each call's function
        self.calls: list[ast.Call] = []
        self.calls_backward = False
        self.module_uses: set[str] = set()  # names `.parameters()` and the like are called on (prescan's)
        self.returns_value = False  # a `return x` (flow gives a call of it what x is)
        self.returns: list[ast.expr] = []
        self.parent: _Scope | None = None  # the scope the def is in
        self.sites: list[_Site] = []
        self.step_loops: set[int] = set()  # loops that call backward/step/zero_grad
        self._loop_headers: dict[int, bool] = {}  # loops whose header names a loader, an epoch, ...
        self._init_attributes: dict[str, _Kinds] | None = None
        self._module_params: dict[str, _Kinds] | None = None

    def may_keep_graph(self, facts: _FileFacts) -> bool:
        imported = [site for site in self.sites if site.kind == _IMPORTED_DEF
                    and facts.from_elsewhere(site.target.partition(".")[0], site.target)]
        lasting = [site for site in self.sites
                   if site.kind != _IMPORTED_DEF and self.store_outlives_step(site, facts)]
        if not (lasting or imported) or not self.may_make_graph(facts):
            return False
        # A call of another module's def keeps what it is given only where the project says that
        # def may (it may read that module): asked once the function may make a graph at all.
        lasting += [site for site in imported if def_may_keep_arguments(site.target)]
        if not lasting:
            return False
        values = _GraphValues(self, facts)
        return any(values.may_hold_graph(value, site.unpacked) and self._reads_own_target(site, values)
                   and (site.kind != _METHOD_CALL or values.kinds(site.target).foreign)
                   for site in lasting for value in site.values)

    def _reads_own_target(self, site: _Site, values: _GraphValues) -> bool:
        """For a chained store, whether its value may read what it replaces; other stores need not."""
        if site.kind == _CHAINED_NAME:
            return values.reads(site.values[0], site.target)
        if site.kind == _CHAINED_ATTRIBUTE:
            return values.reads(site.values[0], _dotted(site.target))
        if site.kind == _SETATTR:
            return values.reads(site.values[0], f"{_dotted(site.target.args[0])}.{site.target.args[1].value}")
        return True

    # ----- the target ---------------------------------------------------------------------------

    def store_outlives_step(self, site: _Site, facts: _FileFacts) -> bool:
        kind, target, loops = site.kind, site.target, site.loops
        if kind == _METHOD_CALL:  # flow's KeptElsewhere: the receiver's, which may be anything but a local
            return self._name_outlives(target.id, loops, param_outlives=True) if isinstance(target, ast.Name) else True
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
    def callees(self) -> set[str]:
        """The dotted names called (qualified later, once all the imports are known)."""
        return {_dotted(func) for func in self.called} - {None}

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

    # ----- the value ----------------------------------------------------------------------------

    def may_make_graph(self, facts: _FileFacts) -> bool:
        """Cheap: whether anything in the function can give a module, a parameter or a
        graph-attached value. _GraphValues answers value by value for those that pass."""
        if self.makes_graph_itself(facts) or self.given_graph(facts):
            return True
        init = self.init(facts)
        return init is not None and ("register_parameter" in init.attribute_loads or init.makes_graph_itself(facts))

    def given_graph(self, facts: _FileFacts) -> bool:
        """Whether a function that may make graph-attached values calls this def (by name): flow
        walks it with the caller's values, and keeps what it stores on an attribute or a global."""
        return not isinstance(self.node, (ast.Module, ast.ClassDef)) and self.stores_a_parameter \
            and facts.given_graph(self.node.name)

    @cached_property
    def stores_a_parameter(self) -> bool:
        """Whether a store here keeps something read from a parameter: what a caller passes can
        only be kept that way."""
        params = self.params - {self.self_name}
        return any(isinstance(node, ast.Name) and node.id in params
                   for site in self.sites for value in site.values for node in walk(value))

    def may_make_graph_cheaply(self, facts: _FileFacts) -> bool:
        """makes_graph_itself, or an __init__ that puts a module or parameter on self."""
        if self.makes_graph_itself(facts):
            return True
        init = self.init(facts)
        return init is not None and init is not self and (
            "register_parameter" in init.attribute_loads or init.makes_graph_directly(facts))

    def makes_graph_itself(self, facts: _FileFacts) -> bool:
        if self.makes_graph_directly(facts):
            return True
        # flow walks a call of the file's own function or method with its arguments
        return any(facts.returns_graph(callee.rsplit(".", 1)[-1]) for callee in self.callees)

    def makes_graph_directly(self, facts: _FileFacts) -> bool:
        if self.calls_backward:
            return True
        if any(facts.qualify(callee).startswith(_AUTOGRAD_CALLS) and callee.rsplit(".", 1)[-1] in ("backward", "grad")
               for callee in self.callees):
            return True  # `from torch.autograd import grad` too: qualified first
        if any(_module_like(name) for name in (*self.loads, *self.attribute_loads, *self.params)):
            return True
        if any(_inherited_elsewhere(func, self.owner, facts) for func in self.called):
            return True
        if not self.loads.isdisjoint(facts.module_instances) or self.module_params(facts) or self.module_uses:
            return True
        return any(facts.makes_module(callee) for callee in self.callees)

    def module_params(self, facts: _FileFacts) -> dict[str, _Kinds]:
        """Parameters flow binds to a module (FileModel._param_value): a module class's self in
        its methods, one annotated with a module class (`encoder: nn.Module`, `net: Net`)."""
        if self._module_params is None:
            found: dict[str, _Kinds] = {}
            if not isinstance(self.node, ast.Module):
                arguments = self.node.args
                for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                 *(a for a in (arguments.vararg, arguments.kwarg) if a is not None)):
                    annotated = _annotated_class(argument.annotation, facts)
                    if annotated is not None and (annotated in facts.module_class_names
                                                  or annotated.rsplit(".", 1)[-1] == "Module"
                                                  or is_nn_module_class(annotated)):
                        found[argument.arg] = _Kinds(module=True, instance=annotated in facts.module_class_names)
                if self.self_name is not None and self.owner.name in facts.module_class_names \
                        and self.node.name != "__init__":
                    found[self.self_name] = _Kinds(module=True, instance=True)
                if self.is_forward_hook(facts):  # (module, input, output): input and output may be
                    names = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
                    for name in names[2 if self.self_name else 1:]:
                        found[name] = found.get(name, _NOTHING) | _Kinds(tensor=True, graph=True)
            self._module_params = found
        return self._module_params

    def is_forward_hook(self, facts: _FileFacts) -> bool:
        name = self.node.name
        if name in facts.hook_names:
            return True
        parent = self.parent
        if parent is not None and not isinstance(parent.node, (ast.Module, ast.ClassDef)) \
                and parent.node.name in facts.hook_factories:
            return True
        return name == "__call__" and self.owner is not None and any(
            self.owner.name in facts.ancestors(cls) for hook in facts.hook_names for cls in facts.classes_of(hook))

    def init(self, facts: _FileFacts) -> _Scope | None:
        """The __init__ whose attributes flow gives this method's `self.x` (FileModel's
        self_attributes): its class's own, for a method with a self (not a plain class's __init__)."""
        if self.self_name is None or (self.node.name == "__init__" and self.owner.name not in facts.module_class_names):
            return None
        init = self.owner.methods.get("__init__")
        return init if init is not None and init.node.args.args else None

    def init_attributes(self, facts: _FileFacts) -> dict[str, _Kinds]:
        """What this __init__ puts on self, by attribute, as FileModel._init_attributes reads it:
        its stores into self (walked with no attributes known), register_buffer/register_parameter."""
        if self._init_attributes is None:
            owner = self.node.args.args[0].arg
            values = _GraphValues(self, facts, own_attributes={}, given=False)  # as flow: no caller binds them
            found: dict[str, _Kinds] = {}
            for targets, value, derived in values.bindings:
                for target in targets:
                    head, _, attribute = target.partition(".")
                    if head == owner and attribute and "." not in attribute:
                        found[attribute] = found.get(attribute, _NOTHING) | values.kinds(value, derived)
            for node in walk(self.node):
                if not isinstance(node, ast.Call):
                    continue
                func, args = node.func, node.args
                if isinstance(func, ast.Name) and func.id == "setattr" and len(args) >= 3 and _is_text(args[1]):
                    found[args[1].value] = found.get(args[1].value, _NOTHING) | values.kinds(args[2])
                elif isinstance(func, ast.Attribute) and func.attr in ("register_buffer", "register_parameter") \
                        and args and _is_text(args[0]):
                    kinds = _Kinds(tensor=True, parameter=func.attr == "register_parameter")
                    found[args[0].value] = found.get(args[0].value, _NOTHING) | kinds
            self._init_attributes = found
        return self._init_attributes


class _Kinds(NamedTuple):
    """What a value may be (or hold, for a container), as far as flow.py's Val can tell."""

    module: bool = False
    tensor: bool = False
    graph: bool = False  # graph-attached
    parameter: bool = False  # an nn.Parameter: graph-free itself, graph-attached once used
    instance: bool = False  # an instance of a module class of this file (flow's Val.module_class)
    foreign: bool = False  # an instance of another module's class: its methods may keep their arguments

    def __or__(self, other: _Kinds) -> _Kinds:
        return _Kinds(*(a or b for a, b in zip(self, other)))


_NOTHING = _Kinds()


class _GraphValues:
    """Which values of one function may be a module, a tensor, a parameter or graph-attached:
    flow.py's evaluation (values.py) with each answer widened to "may", and each name or
    attribute holding everything any of its bindings gives it (flow-insensitive)."""

    def __init__(self, scope: _Scope, facts: _FileFacts, own_attributes: dict[str, _Kinds] | None = None,
                 given: bool = True):
        self.facts = facts
        self.module_uses = scope.module_uses
        self.self_name = scope.self_name
        self.owner = scope.owner
        if own_attributes is None:
            init = scope.init(facts)
            own_attributes = init.init_attributes(facts) if init is not None else {}
        self.own_attributes = own_attributes
        self.bindings = list(_bindings(scope.node))
        self._names: dict[int, frozenset[str]] = {}
        self.values_of: dict[str, list[ast.expr]] = {}
        for targets, value, _ in self.bindings:
            for target in targets:
                self.values_of.setdefault(target, []).append(value)
        # A name backward() is called on is graph-attached wherever it is bound (prescan's roots).
        roots = _backward_roots(scope.node) & self.values_of.keys()
        self.held: dict[str, _Kinds] = dict.fromkeys(roots, _Kinds(tensor=True, graph=True))
        for name, kinds in scope.module_params(facts).items():
            self.held[name] = self.held.get(name, _NOTHING) | kinds
        if given and scope.given_graph(facts):  # walked with a caller's arguments: any may be graph-attached
            for name in scope.params - {scope.self_name}:
                self.held[name] = self.held.get(name, _NOTHING) | _Kinds(tensor=True, graph=True)
        changed = True
        while changed:
            changed = False
            for targets, value, derived in self.bindings:
                kinds = self.kinds(value, derived)
                for target in targets:
                    before = self.held.get(target, _NOTHING)
                    if before | kinds != before:
                        self.held[target] = before | kinds
                        changed = True

    def may_hold_graph(self, value: ast.expr, derived: bool = False) -> bool:
        return self.kinds(value, derived).graph

    def kinds(self, value: ast.expr, derived: bool = False) -> _Kinds:
        """`derived`: what is kept is computed from the value (one element of it, or a sum with
        it): a view or a sum of a parameter is graph-attached, the parameter itself is not."""
        kinds = self._kinds(value)
        return kinds._replace(graph=True) if derived and kinds.parameter else kinds

    def _kinds(self, e: ast.AST) -> _Kinds:
        kind = type(e)
        if kind is ast.Name:
            held = self.held.get(e.id, _NOTHING)
            if e.id in self.facts.foreign_instances:
                held = held._replace(foreign=True)
            if e.id in self.facts.module_instances:
                return held._replace(module=True, instance=True)
            return held._replace(module=True) if _module_like(e.id) or e.id in self.module_uses else held
        if kind is ast.Attribute:
            return self._attribute(e)
        if kind is ast.Call:
            return self._call(e)
        if kind is ast.Subscript:
            base = self._kinds(e.value)
            return base._replace(graph=base.graph or base.parameter)
        if kind is ast.BinOp:
            both = self._kinds(e.left) | self._kinds(e.right)
            return both._replace(graph=both.graph or both.parameter)
        if kind is ast.UnaryOp:
            if isinstance(e.op, ast.Not):
                return _NOTHING
            inner = self._kinds(e.operand)
            return inner._replace(graph=inner.graph or inner.parameter)
        if kind is ast.Compare:  # a tensor of booleans, never graph-attached
            return _Kinds(tensor=any(self._kinds(o).tensor for o in (e.left, *e.comparators)))
        if kind is ast.IfExp:
            return self._kinds(e.body) | self._kinds(e.orelse)
        if kind is ast.BoolOp or kind is ast.Tuple or kind is ast.List or kind is ast.Set:
            return self._either(e.values if kind is ast.BoolOp else e.elts)
        if kind is ast.Dict:
            return self._either(e.values)
        if kind is ast.Starred or kind is ast.NamedExpr or kind is ast.Await:
            return self._kinds(e.value)
        if kind is ast.ListComp or kind is ast.SetComp or kind is ast.GeneratorExp:
            return self._kinds(e.elt)
        if kind is ast.DictComp:
            return self._kinds(e.value)
        return _NOTHING  # literals, lambdas

    def _either(self, values) -> _Kinds:
        found = _NOTHING
        for value in values:
            found |= self._kinds(value)
        return found

    def _attribute(self, e: ast.Attribute, base: _Kinds | None = None) -> _Kinds:
        """As flow's _attribute: what the walk stored there, what __init__ put on self, a name
        like a module's, or a tensor's views (.T, .real) and detached data (.data, .grad)."""
        dotted = _dotted(e)
        found = self.held.get(dotted, _NOTHING) if dotted is not None else _NOTHING
        if dotted is not None and self.self_name is not None and dotted.count(".") == 1 \
                and dotted.startswith(f"{self.self_name}."):
            found |= self.own_attributes.get(e.attr, _NOTHING)
        if _module_like(e.attr):
            found = found._replace(module=True)
        if base is None:
            base = self._kinds(e.value)
        # flow reads self.x from what __init__ put there before it asks what methods store, unless
        # that is unknown: then it asks them too (so, here, always)
        if base.instance and e.attr in self.facts.method_stores:
            found |= _Kinds(tensor=True, graph=True)
        if base.graph and not e.attr.startswith("_") and e.attr not in DETACHED_ATTRIBUTES:
            found |= _Kinds(tensor=True, graph=True)  # out.logits of a model output, as flow reads it
        if base.tensor and e.attr in _TENSOR_VIEW_ATTRIBUTES:
            found |= _Kinds(tensor=True, graph=base.graph or base.parameter)
        elif base.tensor and e.attr in DETACHED_ATTRIBUTES:
            found |= _Kinds(tensor=True)
        return found

    def _call(self, e: ast.Call) -> _Kinds:
        """As flow's _call: a module called, a module's forward, a tensor method, a torch
        function or sum/tuple/list give what their inputs hold; any other call gives nothing
        graph-attached (an unknown function's result is unknown, not a tensor)."""
        arguments = self._either((*e.args, *(keyword.value for keyword in e.keywords)))
        passes_graph = arguments.graph or arguments.parameter
        func = e.func
        receiver = self._kinds(func.value) if isinstance(func, ast.Attribute) else _NOTHING
        callee = self._attribute(func, receiver) if isinstance(func, ast.Attribute) else self._kinds(func)
        found = _Kinds(tensor=True, graph=True) if callee.module else _NOTHING
        if isinstance(func, ast.Attribute):
            method = func.attr
            if receiver.module and method == "forward":
                found |= _Kinds(tensor=True, graph=True)
            if receiver.module and method in MODULE_RETURNING_METHODS:
                found |= _Kinds(module=True)
            if receiver.tensor and method not in SCALAR_METHODS:
                graph = method not in DETACHING_METHODS and (receiver.graph or receiver.parameter or passes_graph)
                found |= _Kinds(tensor=True, graph=graph)
            elif receiver.graph and method not in SCALAR_METHODS and method not in DETACHING_METHODS:
                found |= _Kinds(tensor=True, graph=True)  # a distribution's log_prob, as flow reads it
            if method == "apply":  # an autograd Function's
                found |= _Kinds(tensor=True, graph=passes_graph)
            # flow walks `self.method()` and a method of an instance of a class of the file
            if receiver.instance or _is_own_receiver(func.value, self.self_name, self.facts):
                found |= self._own_call(method, passes_graph, arguments.module)
            if self.self_name is not None and _inherited_elsewhere(func, self.owner, self.facts):
                found |= _Kinds(module=True, tensor=True, graph=True)  # whatever the base's method returns
        elif isinstance(func, ast.Name) and func.id in ("tuple", "list", "sum"):
            found |= arguments._replace(graph=passes_graph)
        elif isinstance(func, ast.Name):
            # a module passed in is called there: `run_layer(nn.Linear(4, 4), x)`
            found |= self._own_call(func.id, passes_graph, arguments.module)
        name = _dotted(func)
        if name is None:
            return found
        local_head = name.partition(".")[0]
        name = self.facts.qualify(name)
        if name in ("torch.autograd.grad", "torch.autograd.functional.vjp") \
                and any(k.arg == "create_graph" for k in e.keywords):
            return found | _Kinds(tensor=True, graph=True)  # flow: graph-attached with create_graph=True
        if name in PARAMETER_CONSTRUCTORS:
            return found | _Kinds(tensor=True, parameter=True)
        if name.startswith("torch.nn.") and not name.startswith("torch.nn.functional."):
            last = name.rsplit(".", 1)[1]
            return found._replace(module=found.module or (last[:1].isupper() and last not in NN_NOT_MODULES))
        if is_tensor_op(name):
            return found | _Kinds(tensor=True, graph=passes_graph)
        if is_distribution(name):
            return found | _Kinds(graph=passes_graph)
        if name in CHECKPOINT_FUNCTIONS and e.args:
            return found | _Kinds(tensor=True, graph=passes_graph or self._kinds(e.args[0]).module)
        if name in self.facts.module_class_names:
            return found._replace(module=True, instance=True)
        if self.facts.from_elsewhere(local_head, name):
            # A class may be an nn.Module (called, a graph) or the project's (FileModel.imported_call
            # tells them by the capital, as Python names classes); a def may return what it is
            # given, or what a module it is given makes (`compute_loss(model, x, y)`), or an
            # instance of the project's class: imported_call walks it when given a tensor or module.
            walked = passes_graph or arguments.module or arguments.tensor
            return found | _Kinds(module=True, tensor=True, graph=passes_graph or arguments.module,
                                  foreign=walked or name.rsplit(".", 1)[-1][:1].isupper())
        return found

    def _own_call(self, name: str, passes_graph: bool, passes_module: bool = False) -> _Kinds:
        """A call of a def of this file (by name: a method or a function), which flow walks with
        the call's arguments: what it returns may be what it was given, or what it made, or what
        a module it was given made when it calls that parameter (`run_layer(nn.Linear(4, 4), x)`)."""
        name = self.facts.compiled.get(name, name)
        if name not in self.facts.returning_defs:
            return _NOTHING
        if self.facts.returns_graph(name):
            return _Kinds(module=True, tensor=True, graph=True, instance=True)
        calls_it = passes_module and name in self.facts.parameter_callers
        return _Kinds(tensor=True, graph=passes_graph or calls_it)

    def reads(self, value: ast.expr, target: str) -> bool:
        """Whether `value` may read `target`, directly or through the names it reads
        (`new = self.h + x; self.h = new` chains self.h as flow's reads do)."""
        seen: set[str] = set()
        todo = [value]
        while todo:
            names = self._read_names(todo.pop())
            if target in names:
                return True
            for name in names - seen:
                seen.add(name)
                todo.extend(self.values_of.get(name, ()))
        return False

    def _read_names(self, value: ast.expr) -> frozenset[str]:
        """The names and dotted attribute chains an expression reads (lambdas left out, as flow)."""
        found = self._names.get(id(value))
        if found is None:
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
            found = self._names[id(value)] = frozenset(names)
        return found


_TENSOR_VIEW_ATTRIBUTES = VIEW_ATTRIBUTES | {"values", "indices"}  # and a topk/sort pair's


def _bindings(function: ast.AST) -> Iterator[tuple[set[str], ast.expr, bool]]:
    """(names and dotted attributes bound, the value, whether they get something computed from
    it: one element, or the sum of `+=`) for each binding in the function's own body:
    assignments, loop and comprehension targets, `with ... as`, `:=`."""
    stack = list(children(function)) if isinstance(function, ast.Module) else list(function.body)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in _NESTED_SCOPES:
            continue
        if kind is ast.Assign:
            for target in node.targets:
                yield _bound_names(target), node.value, isinstance(target, (ast.Tuple, ast.List))
        elif kind is ast.AugAssign:
            yield _bound_names(node.target), node.value, True
        elif (kind is ast.AnnAssign and node.value is not None) or kind is ast.NamedExpr:
            yield _bound_names(node.target), node.value, False
        elif kind in (ast.For, ast.AsyncFor, ast.comprehension):
            yield _bound_names(node.target), node.iter, True
        elif kind is ast.withitem and node.optional_vars is not None:
            yield _bound_names(node.optional_vars), node.context_expr, False
        stack.extend(children(node))


_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _bound_names(target: ast.expr) -> set[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound_names(e) for e in target.elts))
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    name = target.id if isinstance(target, ast.Name) else _dotted(target)
    return {name} if name is not None else set()


def _backward_roots(function: ast.AST) -> set[str]:
    """The names `x.backward()` and `torch.autograd.backward(x)` / `grad(x)` are computed from
    (prescan's backward_roots): flow makes each graph-attached where it is bound."""
    roots: set[str] = set()
    for node in walk(function):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "backward":
            roots |= _roots(func.value)
        callee = _dotted(func) or ""
        if callee.startswith(_AUTOGRAD_CALLS) and callee.rsplit(".", 1)[1] in ("backward", "grad") and node.args:
            roots |= _roots(node.args[0])
    return roots


def _roots(expr: ast.expr) -> set[str]:
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(expr, ast.BinOp):
        return _roots(expr.left) | _roots(expr.right)
    if isinstance(expr, ast.Call):
        found = _roots(expr.func.value) if isinstance(expr.func, ast.Attribute) else set()
        return found.union(*(_roots(a) for a in (*expr.args, *(k.value for k in expr.keywords))))
    if isinstance(expr, ast.Subscript):
        return _roots(expr.value)
    return set()


class _FileFacts:
    """One pass over the file: each function's facts, the imports, the classes."""

    def __init__(self, tree: ast.Module):
        self.aliases: dict[str, str] = {}
        self.foreign: set[str] = set()  # names from-imported from outside torch ("*": a star import)
        self.classes: list[_Class] = []
        # Attributes any method stores (`self.x = v`, setattr): reading one from an instance of a
        # module class may give what its forward stored there (flow's stores_graph_on_self).
        self.method_stores: set[str] = set()
        self._top_level_calls: dict[str, set[str]] = {}  # `model = Net()` at the top: model -> {Net}
        # `step = f(train_step)` at the top: step -> (f, train_step); None for any other value
        self._wrapped: dict[str, tuple[str | None, str] | None] = {}
        # Forward hooks, as FileModel.forward_hooks finds them: by name, by the factory that
        # returns them, or by an instance whose __call__ is one.
        self._given: dict[str, bool] = {}  # see given_graph
        self._returns_graph: dict[str, bool] = {}
        self._values: dict[int, _GraphValues] = {}
        self.hook_names: set[str] = set()
        self.hook_factories: set[str] = set()
        self.scopes: list[_Scope] = [_Scope(tree, None)]
        self._owner: _Class | None = None  # the class whose body is being read
        self._children(tree, self.scopes[0], ())

    def release(self) -> None:
        """Unlink what links back (a class and its methods' scopes, the facts and the values
        worked out with them): those cycles would keep the file's tree alive until the cyclic
        collector ran, where dropping the facts now frees it (tests/test_reference_cycles.py checks it)."""
        for cls in self.classes:
            cls.methods.clear()
        self._values.clear()
        self.classes.clear()
        self.scopes.clear()

    def qualify(self, name: str) -> str:
        """As names.ImportTable.qualify does."""
        head, _, rest = name.partition(".")
        full = self.aliases.get(head, head)
        return f"{full}.{rest}" if rest else full

    def makes_module(self, callee: str) -> bool:
        """A torch.nn class (a module; a Parameter too, loosely), or a module class of this file:
        the cheap test, before _GraphValues looks closer."""
        name = self.qualify(callee)
        return (name.startswith("torch.nn.") and name.rsplit(".", 1)[1][:1].isupper()) \
            or name in self.module_class_names

    @cached_property
    def compiled(self) -> dict[str, str]:
        """`fast = torch.compile(train_step)` at the top level: fast -> train_step, as
        FileModel.compiled reads it (flow walks the def for a call of either name)."""
        return {name: wrapped[1] for name, wrapped in self._wrapped.items()
                if wrapped is not None and wrapped[0] is not None and self.qualify(wrapped[0]) == "torch.compile"}

    @cached_property
    def returning_defs(self) -> set[str]:
        """The names of the file's defs that return a value (a `return x`, not only `return None`)."""
        return {scope.node.name for scope in self.scopes if scope.returns_value}

    @cached_property
    def parameter_callers(self) -> set[str]:
        """The defs that call one of their parameters (`fn(x)`, `block.forward(x)`): given a
        module, they make graph-attached values."""
        found: set[str] = set()
        for scope in self.scopes:
            if isinstance(scope.node, (ast.Module, ast.ClassDef)):
                continue
            params = scope.params - {scope.self_name}
            for func in scope.called:
                head = func.value if isinstance(func, ast.Attribute) and func.attr == "forward" else func
                if isinstance(head, ast.Name) and head.id in params:
                    found.add(scope.node.name)
                    break
        return found

    def given_graph(self, name: str) -> bool:
        """Whether some function that may make graph-attached values calls a def of this name
        (last part) with an argument that may be one (or a module, when it calls that parameter)."""
        known = self._given.get(name)
        if known is None:
            known = self._given[name] = any(
                self._passes_graph(scope, call) for scope, call in self._own_calls.get(name, ())
                if scope.makes_graph_itself(self))
        return known

    @cached_property
    def _own_calls(self) -> dict[str, list[tuple[_Scope, ast.Call]]]:
        """Each call flow follows into a def of the file, by the def's name (see _calls_own)."""
        found: dict[str, list[tuple[_Scope, ast.Call]]] = {}
        for scope in self.scopes:
            for call in scope.calls:
                func = call.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
                if name is not None and _calls_own(call, name, scope.self_name, self):
                    if isinstance(func, ast.Name):
                        name = self.compiled.get(name, name)
                    found.setdefault(name, []).append((scope, call))
        return found

    def _passes_graph(self, scope: _Scope, call: ast.Call) -> bool:
        values = self._values.get(id(scope))
        if values is None:  # one level: what the caller makes itself
            values = self._values[id(scope)] = _GraphValues(scope, self, given=False)
        kinds = values._either((*call.args, *(k.value for k in call.keywords)))
        callee = (_dotted(call.func) or "").rsplit(".", 1)[-1]
        return kinds.graph or kinds.parameter or kinds.module and callee in self.parameter_callers

    def returns_graph(self, name: str) -> bool:
        """Whether a def of this name may return a graph-attached value or a module whatever it is
        given: one of its `return`s may give one, by what it makes itself or calls (what it is given
        is the call's own business: _GraphValues._own_call)."""
        known = self._returns_graph.get(name)
        if known is None:
            self._returns_graph[name] = True  # a recursion assumes the worst, as a superset must
            known = False
            for scope in self._returning.get(name, ()):
                if not (scope.may_make_graph_cheaply(self)):
                    continue
                values = _GraphValues(scope, self, given=False)
                if any((k := values.kinds(value)).graph or k.module or k.parameter for value in scope.returns):
                    known = True
                    break
            self._returns_graph[name] = known
        return known

    @cached_property
    def _returning(self) -> dict[str, list[_Scope]]:
        """The defs with a `return x`, by name: returns_graph asks by name, once per name asked."""
        found: dict[str, list[_Scope]] = {}
        for scope in self.scopes:
            if not isinstance(scope.node, (ast.Module, ast.ClassDef)) and scope.returns:
                found.setdefault(scope.node.name, []).append(scope)
        return found

    def ancestors(self, name: str) -> set[str]:
        """The class and its bases in this file, as FileModel.method_of follows them."""
        by_name = {cls.name: cls for cls in self.classes}
        found, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in found or current not in by_name:
                continue
            found.add(current)
            todo.extend(base.rsplit(".", 1)[-1] for base in by_name[current].bases)
        return found

    @cached_property
    def class_names(self) -> set[str]:
        return {cls.name for cls in self.classes}

    def classes_of(self, name: str) -> set[str]:
        """The classes a top-level name is bound to a call of (`recorder = Recorder()`)."""
        return self._top_level_calls.get(name, set())

    @cached_property
    def module_instances(self) -> set[str]:
        """Top-level names bound to a call of a module class of this file: flow's global_value
        gives them that class."""
        return {name for name, called in self._top_level_calls.items() if called & self.module_class_names}

    @cached_property
    def foreign_instances(self) -> set[str]:
        """Top-level names bound to a call of another module's class (`METER = utils.Meter()`):
        flow's global_value gives them the project's class, whose methods may keep their arguments."""
        return {name for name, called in self._top_level_calls.items() if any(map(self.names_foreign_class, called))}

    def names_foreign_class(self, name: str) -> bool:
        """Whether a dotted name as written may be a class of another module: imported (or
        star-imported), and capitalized as Python names classes (FileModel._project_instance)."""
        return name.rsplit(".", 1)[-1][:1].isupper() and self.from_elsewhere(name.partition(".")[0], name)

    def from_elsewhere(self, head: str, name: str) -> bool:
        """Whether `name` (headed `head` as written) may come from another module than torch: its
        head imported from one, or, with a star import, bound by it (a star-imported module's own
        import too: `utils.remember` where it did `from app import utils`)."""
        return head in self.foreign or "*" in self.foreign

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
        elif scope.owner is not None:
            self.method_stores.add(node.attr)
        self._visit(node.value, scope, loops)

    def _call(self, node: ast.Call, scope: _Scope, loops) -> None:
        func = node.func
        arguments = tuple(value for value in (*node.args, *(keyword.value for keyword in node.keywords))
                          if type(value) not in _NEVER_GRAPH)
        if isinstance(func, ast.Attribute):
            method = func.attr
            if method == "backward":
                scope.calls_backward = True
            if method in MODULE_ONLY_METHODS and isinstance(func.value, ast.Name):
                scope.module_uses.add(func.value.id)
            if makes_a_step(method, _dotted(func.value)):
                scope.step_loops.update(map(id, loops))
            elif method == "step" and steps_a_simulator(_dotted(func.value)) and loops:
                scope.step_loops.add(id(loops[-1]))  # a rollout keeps what it stores per env step too
            if arguments:
                scope.sites.append(_Site(_CONTAINER if method in CONTAINER_STORING_METHODS else _METHOD_CALL,
                                         func.value, arguments, loops))
        elif isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 3 \
                and type(node.args[2]) not in _NEVER_GRAPH:
            scope.sites.append(_Site(_SETATTR, node, (node.args[2],), loops))
            if scope.owner is not None and _is_text(node.args[1]):
                self.method_stores.add(node.args[1].value)
        name = _dotted(func) if arguments else None
        if name is not None:
            # `remember(loss)`, `utils.remember(loss)`: maybe a def of another module, which may
            # keep it there. Whether the name is imported is asked once the whole file is read (an
            # import may come after the call); capitalized or not (`import remember as Remember`:
            # FileModel.imported_call tells a class by the name it resolves to).
            scope.sites.append(_Site(_IMPORTED_DEF, name, arguments, loops))
        scope.called.append(func)
        scope.calls.append(node)
        hook = (node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "hook"), None)) \
            if isinstance(func, ast.Attribute) and func.attr in FORWARD_HOOK_REGISTRATIONS else None
        if hook is not None:
            if isinstance(hook, ast.Call):  # a factory's returned closure
                self.hook_factories.add((_dotted(hook.func) or "").rsplit(".", 1)[-1])
            else:
                self.hook_names.add((_dotted(hook) or "").rsplit(".", 1)[-1])
        self._children(node, scope, loops)

    def _assign(self, node: ast.Assign | ast.AnnAssign, scope: _Scope, loops) -> None:
        if node.value is None:  # `x: int` binds nothing
            return
        for target in node.targets if isinstance(node, ast.Assign) else (node.target,):
            if scope is self.scopes[0] and isinstance(target, ast.Name):  # the last binding decides
                self._wrapped[target.id] = _wrapped_def(node.value)
        if type(node.value) not in _NEVER_GRAPH:
            for target in node.targets if isinstance(node, ast.Assign) else (node.target,):
                self._store(target, node.value, scope, loops)
                called = _dotted(node.value.func) if isinstance(node.value, ast.Call) else None
                if scope is self.scopes[0] and isinstance(target, ast.Name) and called is not None:
                    self._top_level_calls.setdefault(target.id, set()).add(called)  # `Net()`, `utils.Meter()`
        self._children(node, scope, loops)

    def _store(self, target: ast.expr, value: ast.expr, scope: _Scope, loops, unpacked: bool = False) -> None:
        if isinstance(target, ast.Name):
            scope.sites.append(_Site(_CHAINED_NAME, target.id, (value,), loops, unpacked))
        elif isinstance(target, ast.Attribute):
            scope.sites.append(_Site(_CHAINED_ATTRIBUTE, target, (value,), loops, unpacked))
        elif isinstance(target, ast.Subscript):
            scope.sites.append(_Site(_CONTAINER, target.value, (value,), loops, unpacked))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._store(element, value, scope, loops, unpacked=True)
        elif isinstance(target, ast.Starred):
            self._store(target.value, value, scope, loops, unpacked=True)

    def _augmented(self, node: ast.AugAssign, scope: _Scope, loops) -> None:
        target = node.target
        if type(node.value) not in _NEVER_GRAPH:  # `self.n += 1`: the usual case, never a graph
            if isinstance(target, ast.Name):
                # flow makes `bank += [h]` (a value it reads as a container) an extend: either may hold
                scope.sites.append(_Site(_AUGMENTED_NAME, target.id, (node.value,), loops))
                scope.sites.append(_Site(_CONTAINER, target, (node.value,), loops))
            elif isinstance(target, ast.Attribute):
                scope.sites.append(_Site(_AUGMENTED_ATTRIBUTE, target, (node.value,), loops))
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):  # epoch_loss[0] += loss
                scope.sites.append(_Site(_AUGMENTED_NAME, target.value.id, (node.value,), loops))
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):  # self.stats[k] += v
                scope.sites.append(_Site(_AUGMENTED_ATTRIBUTE, target.value, (node.value,), loops))
                if scope.owner is not None:  # flow stores it as the attribute (stores_graph_on_self)
                    self.method_stores.add(target.value.attr)
        self._children(node, scope, loops)

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While, scope: _Scope, loops) -> None:
        # The header and the else block count as inside: prescan marks step loops that way.
        self._children(node, scope, (*loops, node))

    def _comprehension(self, node: ast.comprehension, scope: _Scope, loops) -> None:
        # Its target is no local of the function: prescan does not count it either.
        self._visit(node.iter, scope, loops)
        for condition in node.ifs:
            self._visit(condition, scope, loops)

    def _return(self, node: ast.Return, scope: _Scope, loops) -> None:
        value = node.value
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None) \
                and not isinstance(scope.node, ast.Module):
            scope.returns_value = True
            scope.returns.append(value)
        self._children(node, scope, loops)

    def _declaration(self, node: ast.Global | ast.Nonlocal, scope: _Scope, loops) -> None:
        scope.declared.update(node.names)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: _Scope, loops) -> None:
        # Decorators and defaults belong to no walk; the body is a scope of its own.
        function = _Scope(node, self._owner)
        function.parent = scope
        self.scopes.append(function)
        if self._owner is not None:
            self._owner.methods[node.name] = function  # the last def of a name wins, as in FileModel
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
            if not (alias.name == "torch" or alias.name.startswith("torch.")):
                # `import app.losses as L`: may be the project's, as a name from-imported may be
                self.foreign.add(alias.asname or alias.name.partition(".")[0])
            if alias.asname is not None:
                self.aliases[alias.asname] = alias.name
            else:
                head = alias.name.split(".")[0]
                self.aliases.setdefault(head, head)

    def _import_from(self, node: ast.ImportFrom, scope: _Scope, loops) -> None:
        module = node.module or ""
        if node.level or not (module == "torch" or module.startswith("torch.")):
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
    ast.Return: _FileFacts._return,
    ast.Global: _FileFacts._declaration, ast.Nonlocal: _FileFacts._declaration,
    ast.FunctionDef: _FileFacts._function, ast.AsyncFunctionDef: _FileFacts._function,
    ast.ClassDef: _FileFacts._class,
    ast.Import: _FileFacts._import, ast.ImportFrom: _FileFacts._import_from,
}


def _annotated_class(annotation: ast.expr | None, facts: _FileFacts) -> str | None:
    """As FileModel._annotated_class: through Optional[...], `| None` and a quoted name."""
    if annotation is None:
        return None
    if isinstance(annotation, ast.Subscript) and _dotted(annotation.value) in ("Optional", "typing.Optional"):
        annotation = annotation.slice
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr) \
            and isinstance(annotation.right, ast.Constant) and annotation.right.value is None:
        annotation = annotation.left
    if _is_text(annotation):
        return annotation.value
    name = _dotted(annotation)
    return facts.qualify(name) if name is not None else None


def _is_own_receiver(receiver: ast.expr, self_name: str | None, facts: _FileFacts) -> bool:
    """`self.m()` or `super().m()` in a method, or `meter.m()` on a top-level instance of a class
    of the file."""
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
        return self_name is not None  # flow follows it to a base's method (widened: any super() call)
    if not isinstance(receiver, ast.Name):
        return False
    return receiver.id == self_name or bool(facts.classes_of(receiver.id) & facts.class_names)


def _inherited_elsewhere(func: ast.expr, owner: _Class | None, facts: _FileFacts) -> bool:
    """`super().training_step(...)` (not `__init__`) in a method of a class with a base from
    elsewhere: flow walks that base's method in its module, which may return anything."""
    return owner is not None and isinstance(func, ast.Attribute) and func.attr != "__init__" \
        and isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name) \
        and func.value.func.id == "super" and owner.inherits_from_elsewhere(facts)


def _wrapped_def(value: ast.expr) -> tuple[str | None, str] | None:
    """`f(train_step, ...)` or `f(model=train_step)`: (f, train_step), as FileModel reads a
    torch.compile alias."""
    if not isinstance(value, ast.Call):
        return None
    positional = [a for a in value.args if not isinstance(a, ast.Starred)]
    given = positional[0] if positional else next((k.value for k in value.keywords if k.arg == "model"), None)
    return (_dotted(value.func), given.id) if isinstance(given, ast.Name) else None


def _calls_own(call: ast.Call, name: str, self_name: str | None, facts: _FileFacts) -> bool:
    """A call of the def `name` as flow follows it: by its name, or as a method of self or of an
    instance of a class of the file."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == name
    return isinstance(func, ast.Attribute) and func.attr == name and _is_own_receiver(func.value, self_name, facts)


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)
