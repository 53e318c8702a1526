"""How long a container or accumulator outlives the step that stores into it, and what the file
does later with what it keeps.

Shared by the rules about keeping graph-attached values (GL103, GL104): storing into something
that outlives one training step keeps that step's autograd graph alive; whether keeping a
`.detach()`ed or `.item()` copy instead is still right code depends on what is done with it later
(`later_use`) and on where the store runs (`runs_in_forward`).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst

from gradlint.file_model import all_params
from gradlint.flow import Walk, Where
from gradlint.names import dotted
from gradlint.prescan import assigned_paths, child_nodes, descendants, target_names


def outlives_step(scope: str, name: str | None, where: Where) -> str | None:
    """Why the target outlives the step, in words, or None when it does not (as far as we know)."""
    if scope == "global":
        return "a module-level global"
    if scope == "closure":
        return "a variable of the enclosing function"
    if scope == "param":
        return "a parameter (the caller's object)"
    if scope in ("attribute", "self-attribute"):
        return "an attribute"
    if scope == "local":
        # A local built across a loop that is not a training loop (collecting per-layer outputs
        # to concatenate) is consumed within the step: not reported.
        # Only loops inside the innermost one that rebinds the name each iteration matter:
        # an outer epoch loop does not make a per-batch variable outlive its batch.
        loops = where.loops
        fresh_in = [i for i, loop in enumerate(loops) if name in loop.fresh_names]
        inner = loops[fresh_in[-1] + 1:] if fresh_in else loops
        training = [loop for loop in inner if loop.is_step_loop]
        if training and training[-1].per_epoch:
            return None  # stored once per epoch, between the epochs' steps: no per-step accumulation
        if training:
            return "a variable created before the training loop"
        if any(loop.is_rollout for loop in inner):
            return "a variable created before the rollout loop, which keeps every environment step's graph"
    return None


def holder_name(walk: Walk, name: str | None) -> str:
    """`self.history` inside class Trainer -> `Trainer.history`; other names as they are."""
    if not name:
        return ""
    head, _, rest = name.partition(".")
    if rest and head == walk.role.self_name and walk.role.owner_class:
        return f"{walk.role.owner_class}.{rest}"
    return name


# ----- what is done later with what a container or total keeps ---------------------------------
# A fix that stores `.detach()` or `.item()` instead is right only if nothing later differentiates
# what was kept (REINFORCE's `torch.stack(log_probs).sum().backward()`, a memory bank the loss
# reads, a total that is the loss), and `.item()` only if every later use takes a Python number.
# The uses are read from every function of the file that can see the holder; where the analysis
# cannot follow them (the holder or a value computed from it returned, passed to code of another
# file, stored where other code reads it, an unknown method of the object that holds it) they are
# unknown: no fix, unless backward already ran on the kept value (then `.detach()`, which keeps
# the type: no working code can run another backward through a freed graph).


@dataclass(frozen=True)
class LaterUse:
    # A backward the file shows runs through what is kept.
    differentiated: bool
    # What is kept leaves what the file shows (returned, passed to another file's code, the
    # caller's object): whether something differentiates it, or needs a tensor, is unknown.
    unknown: bool
    # Every use seen takes a Python number as well as a tensor (`total / n`, `print`, `sum`, not
    # `torch.stack(losses)`, `total.item()`, `losses[-1].cpu()`).
    floats_do: bool
    why: str = ""


def _unknown(why: str) -> LaterUse:
    return LaterUse(False, True, False, why)


_CANNOT_TELL = "cannot tell"
# Calls that compute from what they are given (their result is followed where it goes), or only
# print or log it: none runs backward.
_SAFE_BUILTINS = frozenset({
    "print", "len", "sum", "min", "max", "float", "int", "round", "str", "repr", "format", "abs", "sorted",
    "list", "tuple", "enumerate", "zip", "range", "isinstance", "any", "all", "bool", "iter", "next",
    "reversed", "dict", "set", "map", "filter", "hasattr", "getattr", "type", "id", "divmod", "pow",
})
_SAFE_MODULES = ("torch.", "numpy.", "np.", "math.", "statistics.", "logging.", "warnings.")
# ... except what runs backward.
_BACKWARD_CALLS = ("torch.autograd.backward", "torch.autograd.grad", "torch.autograd.functional.")
# Methods that log or show a value: none runs backward (an `agent.update(log_probs)` may).
_LOGGING_METHODS = frozenset({
    "log", "log_dict", "info", "debug", "warning", "warn", "error", "exception", "critical", "print",
    "add_scalar", "add_scalars", "add_histogram", "add_text", "set_postfix", "set_postfix_str",
    "set_description", "write", "format", "join",
})
# A Module's own bookkeeping, and Lightning's: called on self, they read none of its attributes
# to run a backward.
_MODULE_METHODS = frozenset({
    "parameters", "named_parameters", "modules", "named_modules", "children", "named_children", "buffers",
    "train", "eval", "zero_grad", "to", "cuda", "cpu", "state_dict", "optimizers", "lr_schedulers",
})
# What a list or dict of numbers has as well as one of tensors.
_CONTAINER_METHODS = frozenset({
    "append", "extend", "insert", "appendleft", "pop", "get", "items", "keys", "values", "clear", "copy",
    "index", "count", "remove", "sort", "reverse", "setdefault", "update", "popleft",
})
_ADDING_METHODS = frozenset({"append", "extend", "insert", "appendleft", "add", "update", "setdefault"})
# What a Python number has too: reading these on a kept value does not show it must stay a tensor.
_FLOAT_ATTRIBUTES = frozenset({"real", "imag", "conjugate", "hex", "is_integer", "as_integer_ratio"})
# What a list of numbers takes as well as a list of tensors.
_TAKES_NUMBERS = frozenset({"torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor",
                            "torch.DoubleTensor", "torch.is_tensor"})
_MAX_DEPTH = 3


def later_use(model, walk: Walk, name: str | None, scope: str) -> LaterUse:
    """What the file does later with what `name` (a container or a total of scope `scope`, as
    ContainerAdd and NameStore name them) keeps."""
    if not name or scope in ("param", "unknown"):
        return _unknown("the caller's object")
    if scope == "attribute":
        return _unknown("an attribute of another object")
    facts = _facts_of(model)
    if scope == "local" and isinstance(walk.function, cst.FunctionDef):
        # the function, and the closures in it that read its variable
        carriers = [(walk.function, {name})] + [
            (node, {name}) for node in descendants(walk.function.body) if isinstance(node, cst.FunctionDef)
            and node in facts and name in facts[node].names and (name in facts[node].globals or not facts[node].binds(name))]
    elif scope == "self-attribute":
        last = name.rsplit(".", 1)[-1]
        carriers = [(node, {n for n in scan.names if n.endswith("." + last) and n.count(".") == name.count(".")})
                    for node, scan in facts.items()]
        carriers = [(node, names) for node, names in carriers if names]
    elif scope == "closure":  # every function that names it (the enclosing ones bind it)
        carriers = [(node, {name}) for node, scan in facts.items() if name in scan.names]
    else:  # a global, a script's name: the module and every function that names it without its own local
        carriers = [(node, {name}) for node, scan in facts.items() if name in scan.names and (
            node is model.module or name in scan.globals or not scan.binds(name))]
    floats_do, unknown = True, ""
    for node, names in carriers:
        scan = facts.get(node)
        if scan is None:
            return _unknown(_CANNOT_TELL)
        found = scan.use_of(model, names, returns_escape=True, depth=0, facts=facts)
        if found.differentiated:
            return found
        if scope == "self-attribute" and not unknown:
            owner = name.split(".", 1)[0]
            call = scan.unknown_self_calls(model, owner)
            if call:
                unknown = f"{owner}.{call}() may read it"
        if found.unknown and not unknown:
            unknown = found.why or _CANNOT_TELL
        floats_do = floats_do and found.floats_do
    return _unknown(unknown) if unknown else LaterUse(False, False, floats_do)


def forward_input(walk: Walk, name: str | None) -> bool:
    """Whether `name` (or the head of `batch.x`) is an input of an nn.Module's forward: the data
    of one call, whose lifetime is the caller's. A loader gives a fresh batch every step, so
    PyG's `data.x = conv(data.x)` and timm's DLA `children.append(x)` keep nothing past it; as
    forward inputs are not assumed graph-attached (precision first), nor are they assumed to
    outlive the step."""
    if walk.role.kind != "module_forward" or not name or not isinstance(walk.function, cst.FunctionDef):
        return False
    head = name.split(".")[0]
    params = walk.function.params
    return head != walk.role.self_name and any(
        param.name.value == head for param in (*params.posonly_params, *params.params, *params.kwonly_params))


def callers_data(walk: Walk, name: str | None, where) -> bool:
    """Whether `name` (or the head of `g.ndata`) is a parameter of the walked def, not its self,
    stored into outside any training or rollout loop of the def: one value per call, in the
    caller's object, whose lifetime is the caller's (a list made anew every step, a per-batch
    graph's `g.ndata`, a `**kwargs` dict). A caller of this file that passes a container outliving
    its step, and the graph to keep, is reported at its call (FileModel.call_result's `keep`);
    FileModel._outlives_the_call leaves a parameter's stores to the caller the same way. A graph
    the def makes itself and puts in such a parameter is reported nowhere: letting it travel to
    the calls found nothing on real code and moved megatron's per-call forward_data_store to four
    call sites (labelled neg)."""
    if not name or not isinstance(walk.function, cst.FunctionDef):
        return False
    head = name.split(".")[0]
    if head == walk.role.self_name or not any(param.name.value == head for param in all_params(walk.function)):
        return False
    return not any(loop.is_step_loop or loop.is_rollout for loop in where.loops)


def runs_in_forward(model, walk: Walk) -> bool:
    """An nn.Module's forward, or a method of the module that forward runs: what it keeps may be
    what the output is computed from, and `.detach()` there stops training through it."""
    return walk.role.kind == "module_forward" or (
        walk.role.kind == "module_method" and isinstance(walk.function, cst.FunctionDef)
        and model.runs_in_forward(walk.function))


_FACTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _facts_of(model) -> "_Facts":
    """Each def of the file (and the module's top level), read when first asked about."""
    found = _FACTS.get(model)
    if found is None:
        found = _FACTS[model] = _Facts(model)
    return found


class _Facts(Mapping):
    """The defs' _Uses by def, each read on first use: a local total's later use reads its own
    def, the closures in it and what they call, not every def of the file (a 1,000-line script
    read 150 of them for each lint in the editor); a self attribute or a global reads them all."""

    def __init__(self, model) -> None:
        self._imports = model.imports
        self._module = model.module
        self._nodes = {id(node): node for node in (*model.all_defs, model.module)}
        self._read: dict[int, _Uses] = {}
        self._order: list[cst.CSTNode] | None = None

    def __getitem__(self, node: cst.CSTNode) -> "_Uses":
        found = self._read.get(id(node))
        if found is None:
            if self._nodes.get(id(node)) is not node:
                raise KeyError(node)
            found = self._read[id(node)] = _Uses(node, self._imports)
        return found

    def __contains__(self, node: object) -> bool:
        return self._nodes.get(id(node)) is node

    def __iter__(self):
        # The order the eager dict had (a walk of the tree, then the top level): the first def
        # with a differentiated use (or an unknown one) is the one a message names.
        if self._order is None:  # one walk of the tree, the first time all of them are asked for
            self._order = [node for node in descendants(self._module) if isinstance(node, cst.FunctionDef)]
            self._order.append(self._module)
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._nodes)


class _Uses:
    """One function's flows (what each name is computed from), backward roots, calls, returns and
    attribute reads, by plain attribute reads; nested defs and classes are read on their own."""

    def __init__(self, root: cst.CSTNode, imports) -> None:
        self.imports = imports
        self.flows: list[tuple[str, frozenset[str]]] = []  # target <- names read
        self.roots: list[frozenset[str]] = []  # what backward is run on
        self.calls: list[tuple[cst.Call, tuple[tuple[cst.Arg, frozenset[str]], ...]]] = []
        self.returns: list[frozenset[str]] = []
        self.attributes: list[tuple[str, str, bool]] = []  # (base, attribute, base read through [..])
        self.names: set[str] = set()
        self.globals: set[str] = set()  # declared `global` (or `nonlocal`): other code reads them
        self.bound: set[str] = set()  # plain names assigned: the function's own locals (unless global)
        self.params: list[str] = []
        if isinstance(root, cst.FunctionDef):
            params = root.params
            self.params = [p.name.value for p in (*params.posonly_params, *params.params)]
            root = root.body
        for child in child_nodes(root):
            self._visit(child)

    # -- reading the body

    def _visit(self, node: cst.CSTNode) -> None:
        kind = type(node)
        if kind is cst.FunctionDef or kind is cst.ClassDef:
            return  # read on its own (a lambda is read as part of its function: `opt.step(lambda: ...)`)
        if kind is cst.Name:
            self.names.add(node.value)
        elif kind is cst.Attribute:
            name = dotted(node)
            if name is not None:
                self.names.add(name)
            base = node.value
            through = False
            while isinstance(base, cst.Subscript):  # `losses[-1].item()`: an item's use
                base, through = base.value, True
            base_name = dotted(base) if isinstance(base, (cst.Name, cst.Attribute)) else None
            if base_name is not None:
                self.attributes.append((base_name, node.attr.value, through))
        elif kind is cst.Assign:
            for target in node.targets:
                self._flow(target.target, node.value)
        elif kind in (cst.AugAssign, cst.AnnAssign) and node.value is not None:
            self._flow(node.target, node.value)
        elif kind is cst.For:
            self._flow(node.target, node.iter)
        elif kind is cst.CompFor:  # its target is the comprehension's own
            self._flow(node.target, node.iter, binds=False)
        elif kind is cst.NamedExpr:
            self._flow(node.target, node.value)
        elif kind is cst.WithItem and node.asname is not None:
            self._flow(node.asname.name, node.item)
        elif kind in (cst.Global, cst.Nonlocal):
            self.globals.update(n.name.value for n in node.names)
        elif kind in (cst.Return, cst.Yield) and node.value is not None:
            self.returns.append(_reads(node.value))
        elif kind is cst.Call:
            self._call(node)
        for child in child_nodes(node):
            self._visit(child)

    def _flow(self, target: cst.BaseExpression, value: cst.BaseExpression, binds: bool = True) -> None:
        reads = _reads(value)
        for name in assigned_paths(target, through_subscripts=True):  # `d[k] = v`: d holds v
            self.flows.append((name, reads))
        if binds:
            self.bound.update(target_names(target))

    def _call(self, node: cst.Call) -> None:
        args = tuple((a, _reads(a.value)) for a in node.args)
        self.calls.append((node, args))
        func = node.func
        name = self.imports.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = dotted(func.value) if isinstance(func.value, (cst.Name, cst.Attribute)) else None
            if method in ("backward", "manual_backward"):
                self.roots.append(_reads(func.value))
                for arg, reads in args:  # `accelerator.backward(loss)`
                    self.roots.append(reads)
            elif method in _ADDING_METHODS and receiver is not None:
                for _, reads in args:
                    self.flows.append((receiver, reads))
        if name is not None and name.startswith(_BACKWARD_CALLS):
            for _, reads in args:
                self.roots.append(reads)

    # -- asking

    def binds(self, name: str) -> bool:
        """Whether the function has its own local of that name (a parameter, or bound in it)."""
        return name in self.params or name in self.bound

    def derived(self, names: set[str]) -> set[str]:
        """The names, and every name computed from them (through assignments, loops, containers
        they are added to), flow-insensitively: a loop's later statements run before its earlier ones."""
        found = set(names)
        changed = True
        while changed:
            changed = False
            for target, reads in self.flows:
                if target not in found and reads & found:
                    found.add(target)
                    changed = True
        return found

    def use_of(self, model, names: set[str], returns_escape: bool, depth: int, facts) -> LaterUse:
        held = self.derived(names)
        if any(reads & held for reads in self.roots):
            return LaterUse(True, False, False, "a backward runs through it")
        unknown = ""
        if returns_escape and any(reads & held for reads in self.returns):
            unknown = "it is returned: the caller decides"
        stored = sorted(name for name in held - names if "." in name or name in self.globals)
        if stored:
            unknown = unknown or f"stored in {stored[0]}, which other code reads"
        floats_do = True
        for call, args in self.calls:
            carrying = [(i, arg) for i, (arg, reads) in enumerate(args) if reads & held]
            if not carrying:
                continue
            verdict = self._callee_use(model, call, carrying, depth, facts)
            if verdict is None:
                unknown = unknown or f"passed to {_call_text(call)}, which this file does not show"
                continue
            if verdict.differentiated:
                return verdict
            if verdict.unknown and not unknown:
                unknown = verdict.why or _CANNOT_TELL
            floats_do = floats_do and verdict.floats_do
        for base, attribute, through in self.attributes:
            if base in held and attribute not in _FLOAT_ATTRIBUTES and not (
                    base in names and not through and attribute in _CONTAINER_METHODS):
                floats_do = False  # `total.item()`, `losses[-1].cpu()`: a tensor's
        return _unknown(unknown) if unknown else LaterUse(False, False, floats_do)

    def _callee_use(self, model, call: cst.Call, carrying, depth: int, facts) -> LaterUse | None:
        """What a call does with the arguments that carry the value; None: the analysis cannot tell."""
        func = call.func
        if any(arg.star for _, arg in carrying):
            return None
        name = self.imports.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if name is not None and name.startswith(_SAFE_MODULES) and not name.startswith(_BACKWARD_CALLS):
            takes_tensors = name.startswith("torch.") and name not in _TAKES_NUMBERS
            return LaterUse(False, False, not takes_tensors)
        if isinstance(func, cst.Name):
            callee = model.functions.get(func.value)
            if callee is not None:
                return _passed_on(model, callee, call, carrying, False, depth, facts)
            if func.value in _SAFE_BUILTINS and func.value not in model.functions:
                return LaterUse(False, False, True)
            return None
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = func.value
            if method in _LOGGING_METHODS:
                return LaterUse(False, False, True)
            if method in _ADDING_METHODS:  # into a container of this function: followed as a flow
                local = isinstance(receiver, cst.Name) and receiver.value not in self.params \
                    and receiver.value not in self.globals and receiver.value not in model.module_names
                return LaterUse(False, False, True) if local else None
            owner = _own_class(model, call, receiver)
            found = model.method_of(owner, method) if owner is not None else None
            if found is not None:
                return _passed_on(model, found[0], call, carrying, True, depth, facts)
        return None

    def unknown_self_calls(self, model, owner: str) -> str | None:
        """A method called on `owner` (self) that this file does not define and that may read any
        of its attributes (a base class's `self.backward()` running `self.loss.backward()`), or
        `owner` passed whole to code this file does not show (`trigger_plugins(self, ...)`)."""
        attributes = _self_attributes(model)
        for call, args in self.calls:
            func = call.func
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == owner:
                method = func.attr.value
                if method in _LOGGING_METHODS or method in _MODULE_METHODS or method in attributes:
                    continue  # `self.model(x)`: a submodule the class sets, not a method
                cls = _own_class(model, call, func.value)
                if cls is None or model.method_of(cls, method) is None:
                    return method
            for arg, _ in args:
                if isinstance(arg.value, cst.Name) and arg.value.value == owner \
                        and self._callee_use(model, call, [(0, arg)], _MAX_DEPTH, {}) is None:
                    return _call_text(call)
        return None


def _passed_on(model, callee: cst.FunctionDef, call: cst.Call, carrying, method: bool, depth: int,
               facts) -> LaterUse | None:
    """A def of this file given the value: what it does with the parameters that receive it (what
    it returns the caller follows)."""
    if depth >= _MAX_DEPTH:
        return None
    uses = facts.get(callee)
    if uses is None:
        return None
    params = uses.params[1:] if method and not _is_static(callee) else uses.params
    receiving: set[str] = set()
    for index, arg in carrying:
        if arg.keyword is not None:
            receiving.add(arg.keyword.value)
            continue
        position = sum(1 for a in call.args[:index] if a.keyword is None)
        if position >= len(params):
            return None  # into *args
        receiving.add(params[position])
    return uses.use_of(model, receiving, returns_escape=False, depth=depth + 1, facts=facts)


def _is_static(function: cst.FunctionDef) -> bool:
    return any(dotted(d.decorator) == "staticmethod" for d in function.decorators)


def _own_class(model, call: cst.Call, receiver: cst.BaseExpression) -> str | None:
    """The class of this file a `self.method(...)` call is made in, when the receiver is the
    method's own first parameter."""
    site = _sites_of(model).get(id(call))
    if site is None or site.owner_class is None or site.function is None or not isinstance(receiver, cst.Name):
        return None
    params = site.function.params.params
    if not params or params[0].name.value != receiver.value or _is_static(site.function):
        return None
    return site.owner_class.name.value


_SITES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _sites_of(model) -> dict:
    found = _SITES.get(model)
    if found is None:
        found = _SITES[model] = {id(site.call): site for site in model.call_sites}
    return found


_ATTRIBUTES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _self_attributes(model) -> frozenset[str]:
    """Every `<name>.<attribute>` a def of the file assigns, by attribute: `self.model = model`."""
    found = _ATTRIBUTES.get(model)
    if found is None:
        found = _ATTRIBUTES[model] = frozenset(target.rsplit(".", 1)[-1] for uses in _facts_of(model).values()
                                               for target, _ in uses.flows if target.count(".") == 1)
    return found


def _call_text(call: cst.Call) -> str:
    return dotted(call.func) or "a call"


# What these give carries no graph: a value read through one is not differentiated through it.
_GRAPH_FREE_METHODS = frozenset({"item", "tolist", "detach", "numpy", "size", "dim", "numel"})
_GRAPH_FREE_CALLS = frozenset({"float", "int", "bool", "len", "str", "round", "repr", "format", "isinstance"})


def _reads(node: cst.CSTNode) -> frozenset[str]:
    """The names and dotted attribute chains an expression reads (`a.b.c` reads a, a.b, a.b.c),
    except through what gives a number or a graph-free tensor (`total.item()`, `len(losses)`)."""
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call) and (
                (isinstance(current.func, cst.Attribute) and current.func.attr.value in _GRAPH_FREE_METHODS)
                or (isinstance(current.func, cst.Name) and current.func.value in _GRAPH_FREE_CALLS)):
            continue
        if isinstance(current, (cst.Name, cst.Attribute)):
            name = dotted(current)
            if name is not None:
                parts = name.split(".")
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                if isinstance(current, cst.Attribute):
                    continue
        stack.extend(child_nodes(current))
    return frozenset(found)
