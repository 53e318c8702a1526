"""Name what holds a surviving tensor: a ctx attribute, a module attribute, a global, a local.

The walk goes up `gc.get_referrers`, one batched scan per level, and stops at the first named
holder. The probe's own frames and containers are skipped. Tensors that only C++ holds (saved
inside an autograd node) have no Python referrer: they are reported as held by the graph of a
named root when one exists.
"""

from __future__ import annotations

import ast
import functools
import gc
import inspect
import os
import re
import sys
import sysconfig
import textwrap
import types
from dataclasses import dataclass, field

_PROBE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_CONTAINERS = (list, tuple, set, frozenset, dict)
# Referrers whose vars() are not attributes of an instance: a method's vars() are its function's,
# a class's or module's namespace is named by the global path, a container by what holds it.
_NOT_INSTANCES = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                  types.CodeType, types.FrameType, *_CONTAINERS)


@dataclass
class Holder:
    kind: str  # "ctx", "attribute", "class attribute", "global", "local", "closure", "default", "cache", "graph", "unknown"
    subject: str  # as the static findings name it: "KNNScatter.ctx.out", "PointEncoder.activations", "HISTORY"
    file: str = ""
    line: int = 0
    detail: str = ""  # "Function KNNScatter (forward at knn.py:12)", "module train, list"
    bytes_per_step: float = 0.0
    graph_nodes_per_step: float = 0.0
    created_at: list[str] = field(default_factory=list)  # "file:line (op)" of the held storages
    verdict: str = ""
    # For an instance attribute, the same holder through the user's module globals bound to the
    # instance, as the static findings name it: "log.history" for `Logger.history`.
    aliases: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{display_path(self.file)}:{self.line}" if self.file else ""


def display_path(path: str) -> str:
    """Relative to the current directory when under it (as gradlint check prints), else as is."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _source_line(obj) -> tuple[str, int]:
    try:
        target = inspect.unwrap(obj)
        lines, start = inspect.getsourcelines(target)
        # Point at the `def`/`class` line, not at a decorator above it.
        offset = next((i for i, text in enumerate(lines) if text.lstrip().startswith(("def ", "async def ", "class "))), 0)
        return inspect.getsourcefile(target) or "", start + offset
    except (TypeError, OSError):
        return "", 0


def _global_line(module: types.ModuleType, name: str) -> int:
    """The first module-level statement that binds `name` (`kept, calls = [], [0]` too), or 0."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (TypeError, OSError, SyntaxError, ValueError):
        return 0
    stack = list(reversed(tree.body))
    while stack:
        statement = stack.pop()
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if any(_binds(target, name) for target in targets):
                return statement.lineno
        elif isinstance(statement, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            stack.extend(reversed([n for n in ast.iter_child_nodes(statement) if isinstance(n, ast.stmt)]))
    return 0


def _binds(target: ast.expr, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_binds(element, name) for element in target.elts)
    return isinstance(target, ast.Starred) and _binds(target.value, name)


@dataclass
class _Node:
    obj: object
    targets: list[int]  # the targets this object is on the way up from (a list holds many)
    attr: str | None  # the nearest dict key on the way up
    cell: object = None  # the nearest closure cell on the way up: names the function's free variable
    via_key: bool = False  # came up as a dict key, not a value: see find_holders
    below: object = None  # the object this one was reached from (which default of a function)

    @property
    def key(self) -> tuple:
        # Two ways up through one object are kept apart when they would be named differently:
        # merged, an instance's second attribute would be named (and charged) as its first.
        return id(self.obj), self.attr, id(self.cell), self.via_key


def _holder_for_owner(owner, attr: str) -> Holder | None:
    import torch

    if isinstance(owner, torch.autograd.function.BackwardCFunction):
        fn_cls = getattr(type(owner), "_forward_cls", None)
        name = fn_cls.__name__ if fn_cls else type(owner).__name__
        file, line = _source_line(fn_cls.forward) if fn_cls else ("", 0)
        # The store itself, where the static finding points: forward's def line when not found.
        stored = _ctx_store_line(fn_cls, attr) if fn_cls else 0
        return Holder("ctx", f"{name}.ctx.{attr}", file, stored or line,
                      f"ctx attribute of {type(owner).__name__} -> Function {name}, forward at {display_path(file)}:{line}")
    if isinstance(owner, (type, types.ModuleType)):
        return None
    return _instance_attribute(owner, attr, "module attribute" if isinstance(owner, torch.nn.Module) else "attribute")


def _instance_attribute(owner, attr: str, kind: str) -> Holder:
    cls = type(owner)
    bindings = _global_bindings(owner)
    aliases = [f"{name}.{attr}" for _, name in bindings]
    if isinstance(owner, types.FunctionType):  # `record.outputs = []` on a def: named by the def
        subject = f"{owner.__qualname__}.{attr}"
        code = owner.__code__
        return Holder("attribute", subject, code.co_filename, code.co_firstlineno,
                      f"{kind} {attr!r} of the function {owner.__qualname__}",
                      aliases=[a for a in aliases if a != subject])
    file, line = _source_line(cls)
    if not file or _is_user_file(file):
        return Holder("attribute", f"{cls.__name__}.{attr}", file, line, f"{kind} {attr!r} of a {cls.__name__}",
                      aliases=aliases)
    # An instance of a library class (an optimizer, a torch module): the user knows it by their
    # own global, at the line that binds it; the class's file is not theirs to change.
    qualified = f"{cls.__module__}.{cls.__qualname__}"
    if not bindings:
        user = _user_attribute_of(owner)
        if user is not None:  # `self.opt = Adam(...)` in the user's Trainer: Trainer.opt.state
            user_cls, name = user
            user_file, user_line = _source_line(user_cls)
            if _is_torch_container(owner):  # `self.extra = nn.ParameterList()`: the list is the holder
                return Holder("attribute", f"{user_cls.__name__}.{name}", user_file, user_line,
                              f"item {attr!r} of the {cls.__name__} {name!r} of a {user_cls.__name__}")
            return Holder("attribute", f"{user_cls.__name__}.{name}.{attr}", user_file, user_line,
                          f"{kind} {attr!r} of {qualified} (attribute {name!r} of a {user_cls.__name__})")
        container = _torch_container_of(owner)
        user = _user_attribute_of(container) if container is not None else None
        if user is not None:  # `self.blocks.append(nn.Linear(8, 8))` each step: Net.blocks
            user_cls, name = user
            user_file, user_line = _source_line(user_cls)
            return Holder("attribute", f"{user_cls.__name__}.{name}", user_file, user_line,
                          f"{kind} {attr!r} of a {cls.__name__} in the {type(container).__name__} {name!r} "
                          f"of a {user_cls.__name__}")
        return Holder("attribute", f"{cls.__name__}.{attr}", "", 0, f"{kind} {attr!r} of a {qualified}")
    module, name = bindings[0]
    return Holder("attribute", aliases[0], module.__file__, _global_line(module, name),
                  f"{kind} {attr!r} of {qualified} (the global {name!r})", aliases=aliases[1:])


def _user_attribute_of(owner) -> tuple[type, str] | None:
    """(class, attribute) of an instance of one of the user's classes that keeps `owner` in an
    attribute. On 3.11 the instance itself refers to it (inline values), else its __dict__ does;
    the attribute is read with dict.items, so no user code runs."""
    for referrer in gc.get_referrers(owner):
        instances = _holders_of_dict(referrer) if type(referrer) is dict else [referrer]
        for instance in instances:
            if isinstance(instance, _NOT_INSTANCES) or not hasattr(instance, "__dict__"):
                continue
            module = sys.modules.get(type(instance).__module__)
            file = vars(module).get("__file__") if isinstance(module, types.ModuleType) else None
            if isinstance(file, str) and _is_user_file(file):
                attrs = vars(instance)
                name = next((k for k, v in dict.items(attrs) if v is owner and isinstance(k, str)), None)
                for registry in _REGISTRIES:  # a submodule is kept in the module's _modules
                    held = dict.get(attrs, registry)
                    if name is None and type(held) is dict:
                        name = next((k for k, v in dict.items(held) if v is owner and isinstance(k, str)), None)
                if name is not None:
                    return type(instance), name
    return None


def _torch_container_of(module):
    """The nn.ModuleList / Sequential / ModuleDict that keeps `module` in its _modules, if one does."""
    for referrer in gc.get_referrers(module):
        if type(referrer) is dict:
            for holder in _holders_of_dict(referrer):
                if _is_torch_container(holder) and _registry_of(holder, referrer):
                    return holder
    return None


def _holders_of_dict(d: dict) -> list:
    """The instances whose attributes `d` is, or that keep it in an attribute (an nn.Module's
    _modules/_parameters/_buffers): the instance itself refers to it (inline values, 3.11+), or its
    materialised __dict__ does. One heap scan for `d`, one per dict that refers to it."""
    found = []
    for holder in gc.get_referrers(d):
        if type(holder) is dict:
            found.extend(h for h in gc.get_referrers(holder)
                         if getattr(h, "__dict__", None) is holder and _registry_of(h, d))
        elif getattr(holder, "__dict__", None) is d or _registry_of(holder, d):
            found.append(holder)
    return found


def _registry_of(instance, registry: dict) -> bool:
    """Whether `registry` is one of an nn.Module's _modules/_parameters/_buffers dicts."""
    attrs = getattr(instance, "__dict__", None)
    return type(attrs) is dict and any(dict.get(attrs, name) is registry for name in _REGISTRIES)


def _is_torch_container(owner) -> bool:
    import torch

    containers = (torch.nn.ParameterList, torch.nn.ParameterDict, torch.nn.ModuleList, torch.nn.ModuleDict,
                  torch.nn.Sequential)
    return isinstance(owner, containers)


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(key)}
    return tuple(os.path.join(os.path.abspath(d), "") for d in dirs)


# Cached per file: the scan runs once per named holder over every loaded module (about 1900
# with torch): about 4 ms a holder uncached, mostly these path checks, and 1 to 2 ms cached (measured).
@functools.cache
def _is_user_file(file: str) -> bool:
    file = os.path.abspath(file)
    return not file.startswith(_library_dirs()) and not any(
        f"{os.sep}{packages}{os.sep}" in file for packages in ("site-packages", "dist-packages"))


def _global_names_of(owner) -> list[str]:
    """Module-level names bound to `owner` in the user's modules, in import order."""
    return [name for _, name in _global_bindings(owner)]


def _global_bindings(owner) -> list[tuple[types.ModuleType, str]]:
    """(module, name) of each module-level name bound to `owner` in the user's modules, in
    import order, each name once.

    Only the user's modules: the static check reads only the user's files, and leaving out the
    standard library and installed packages (torch alone is over a thousand modules) keeps the
    scan to the few modules a training script imports from its own tree.
    """
    bindings: list[tuple[types.ModuleType, str]] = []
    for module in list(sys.modules.values()):
        # The dict, not getattr: a module-level __getattr__ (lazy submodules) would run for a missing name.
        file = vars(module).get("__file__") if isinstance(module, types.ModuleType) else None
        if not isinstance(file, str) or not _is_user_file(file):
            continue
        for name, value in list(vars(module).items()):
            if value is owner and not name.startswith("__") and all(name != seen for _, seen in bindings):
                bindings.append((module, name))
    return bindings


def _ctx_store_line(fn_cls: type, attr: str) -> int:
    """The line of `ctx.<attr> = ...` in the Function's forward or setup_context (its first
    parameter, whatever it is called), or 0."""
    for method in ("forward", "setup_context"):
        function = inspect.unwrap(fn_cls.__dict__.get(method, getattr(fn_cls, method, None)))
        function = getattr(function, "__func__", function)  # a staticmethod object
        try:
            lines, start = inspect.getsourcelines(function)
            ctx = next(iter(inspect.signature(function).parameters))
        except (TypeError, OSError, ValueError, StopIteration):
            continue
        store = re.compile(rf"\b{re.escape(ctx)}\.{re.escape(attr)}\s*(?:=(?!=)|\+=)")
        # `setattr(ctx, name, value)` with a name made at run time: the line that sets it
        dynamic = re.compile(rf"\bsetattr\(\s*{re.escape(ctx)}\s*,")
        for pattern in (store, dynamic):
            found = next((i for i, text in enumerate(lines) if pattern.search(text.split("#")[0])), None)
            if found is not None:
                return start + found
    return 0


def find_holders(targets: list, max_depth: int = 7) -> list[Holder | None]:
    """One Holder (or None) per target object.

    A target reached as a dict key (a parameter keying an optimizer's state) is named that way
    only when no path through values names it: the key is how a library finds its own state,
    the value is where the user put the object (`opt.param_groups` for a parameter group).
    """
    module_dicts = {id(m.__dict__): m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)}
    resolved: dict[int, Holder] = {}
    by_key: dict[int, Holder] = {}
    walked: dict[tuple, set[int]] = {}
    trail: list[_Node] = []  # every node made: keeps its object, so no id in `walked` is reused
    frontier: dict[int, list[_Node]] = {}
    for i, t in enumerate(targets):
        _climb(frontier, walked, trail, _Node(t, [], None), [i])
    ignore: set[int] = {id(targets), id(resolved), id(by_key), id(trail)}
    for _ in range(max_depth):
        if not frontier or len(resolved) == len(targets):
            break
        ignore.add(id(frontier))
        objs = [nodes[0].obj for nodes in frontier.values()]
        ignore.add(id(objs))
        referrers = gc.get_referrers(*objs)
        ignore.add(id(referrers))
        del objs
        nxt: dict[int, list[_Node]] = {}
        for r in referrers:
            if id(r) in ignore or _is_probe_own(r):
                continue
            for child in gc.get_referents(r):
                for node in frontier.get(id(child), ()):
                    pending = [t for t in node.targets if t not in resolved]
                    if not pending:
                        continue
                    holder, up = _classify(r, child, node, module_dicts)
                    if holder is not None:
                        for target in pending:
                            (by_key if node.via_key else resolved).setdefault(target, holder)
                    elif up is not None:
                        _climb(nxt, walked, trail, up, pending)
        del referrers
        frontier = nxt
    return [resolved.get(i) or by_key.get(i) for i in range(len(targets))]


def _climb(level: dict[int, list[_Node]], walked: dict[tuple, set[int]], trail: list[_Node],
           node: _Node, targets: list[int]) -> None:
    """Put `node` on `level` for those of `targets` not yet walked through it.

    Walked per target, not per object: an object first reached from one target (an optimizer's
    state dict, from a parameter) is still the way up for another that reaches it a level later
    (that parameter's exp_avg); dropping it as already seen left the second unnamed.
    """
    done = walked.setdefault(node.key, set())
    new = [t for t in targets if t not in done]
    if not new:
        return
    done.update(new)
    same = next((n for n in level.get(id(node.obj), ()) if n.key == node.key), None)
    if same is not None:
        same.targets.extend(new)  # another item of the same container, named the same way
        return
    node.targets = new
    trail.append(node)
    level.setdefault(id(node.obj), []).append(node)


def _is_probe_own(r) -> bool:
    """The probe's own frames and generators, and the walk's own nodes (one made for an
    already-walked referrer is dropped from the frontier but still holds its object)."""
    if isinstance(r, _Node):
        return True
    code = r.f_code if isinstance(r, types.FrameType) else _suspended_code(r)
    return code is not None and code.co_filename.startswith(_PROBE_DIR)


# What owns a frame that outlives its call, with the prefix of its gi_frame / cr_frame / ag_frame.
_SUSPENDED_PREFIX = {types.GeneratorType: "gi_", types.CoroutineType: "cr_", types.AsyncGeneratorType: "ag_"}
_SUSPENDABLE = tuple(_SUSPENDED_PREFIX)
_LRU_WRAPPER = getattr(functools, "_lru_cache_wrapper", None)  # the C wrapper; None where only the Python one exists
_ABSENT = object()
_REGISTRIES = ("_buffers", "_parameters", "_modules")  # where nn.Module keeps what `self.x` reads


def _suspended_code(r):
    prefix = _SUSPENDED_PREFIX.get(type(r))
    return getattr(r, prefix + "code", None) if prefix else None


def _suspended_frame(r):
    prefix = _SUSPENDED_PREFIX.get(type(r))
    return getattr(r, prefix + "frame", None) if prefix else None


def _classify(r, child, node: _Node, module_dicts) -> tuple[Holder | None, _Node | None]:
    if isinstance(r, dict):
        return _through_dict(r, child, node, module_dicts)
    if isinstance(r, types.FrameType):
        return _local_holder(r, child, node, owner=None), None
    if isinstance(r, _SUSPENDABLE):
        # Since 3.11 a suspended generator keeps its locals itself: the generator, not a frame,
        # is their referrer.
        frame = _suspended_frame(r)
        return (_local_holder(frame, child, node, owner=r) if frame is not None else None), None
    if isinstance(r, type):
        return _class_attribute(r, child, node), None
    if _LRU_WRAPPER is not None and isinstance(r, _LRU_WRAPPER) and _is_lru_cache(r, child):
        return _lru_cache_holder(r), None
    if getattr(r, "__dict__", None) is child and node.attr:
        holder = _holder_for_owner(r, node.attr)
        if holder is not None:
            return holder, None
    # A module's buffer or parameter is named as the user reads it (`Proto.protos`), not by
    # the registry dict torch keeps it in.
    for registry in _REGISTRIES:
        if node.attr and isinstance(child, dict) and getattr(r, registry, None) is child:
            return _holder_for_owner(r, node.attr), None
    attr = _attribute_holding(r, child)
    if attr is not None:
        holder = _holder_for_owner(r, attr)
        if holder is not None:
            return holder, None
    if isinstance(r, types.FunctionType):
        if child is r.__defaults__ or child is r.__kwdefaults__:
            return _default_holder(r, child, node), None
        return _closure_holder(r, child, node), None
    if isinstance(r, types.CellType):
        return None, _Node(r, [], node.attr, r, node.via_key, below=child)
    if isinstance(r, _CONTAINERS) or type(r).__name__ in ("deque", "OrderedDict"):
        return None, _Node(r, [], node.attr, node.cell, node.via_key, below=child)
    return None, None


def _through_dict(r: dict, child, node: _Node, module_dicts) -> tuple[Holder | None, _Node | None]:
    # dict's own methods: a subclass's items() or __iter__ would run user code mid-walk.
    key = next((k for k, v in dict.items(r) if v is child), _ABSENT)
    as_key = key is _ABSENT and any(k is child for k in dict.keys(r))
    if not isinstance(key, str):
        key = node.attr
    elif key in _REGISTRIES and node.attr and isinstance(child, dict):
        key = node.attr  # a module's buffer is `Proto.protos`, not `Proto._buffers`
    module = module_dicts.get(id(r))
    if module is not None:
        if key is None or key.startswith("__"):
            return None, None
        file = getattr(module, "__file__", "") or ""
        return Holder("global", key, file, _global_line(module, key),
                      f"module-level {type(child).__name__} {key!r} in {module.__name__}"), None
    return None, _Node(r, [], key, node.cell, node.via_key or as_key, below=child)


def _local_holder(frame: types.FrameType, child, node: _Node, owner) -> Holder:
    """A local of a running frame, or of a suspended generator or coroutine (`owner`)."""
    # A local that an inner function captured is held through its cell; f_locals shows the contents.
    held = _cell_contents(child) if isinstance(child, types.CellType) else child
    name = next((k for k, v in frame.f_locals.items() if v is held), node.attr or "?")
    code = frame.f_code
    if owner is None:
        return Holder("local", name, code.co_filename, frame.f_lineno,
                      f"local {name!r} of {code.co_name}() (a frame still running)")
    what = {types.GeneratorType: "generator", types.CoroutineType: "coroutine"}.get(type(owner), "async generator")
    bound = _global_names_of(owner)
    through = f" (the global {bound[0]!r})" if bound else ""
    # Where the local is made: the line it waits at says only where the loop yields.
    line = _assigned_line(code, name) or frame.f_lineno
    return Holder("local", name, code.co_filename, line,
                  f"local {name!r} of {getattr(code, 'co_qualname', code.co_name)}(), "
                  f"a {what} suspended at line {frame.f_lineno}{through}")


def _cell_contents(cell: types.CellType):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled
        return _ABSENT


def _class_attribute(cls: type, child, node: _Node) -> Holder | None:
    """A class attribute (`debug_outputs = []` in the class body, appended through `self`).

    The class's namespace dict is reachable only through gc (vars() gives a read-only view of
    it), so it is recognised by holding the same value under the attribute the walk came up by.
    """
    if not node.attr or not isinstance(child, dict):
        return None
    value = dict.get(child, node.attr, _ABSENT)
    if value is _ABSENT or vars(cls).get(node.attr, _ABSENT) is not value:
        return None
    file, line = _source_line(cls)
    return Holder("class attribute", f"{cls.__name__}.{node.attr}", file, _assigned_line(cls, node.attr) or line,
                  f"class attribute {node.attr!r} of {cls.__name__}, shared by every instance")


def _closure_holder(function: types.FunctionType, child, node: _Node) -> Holder | None:
    """A free variable of a closure (`buffer` of a `log` that make_logger returned)."""
    closure = function.__closure__
    if node.cell is None or child is not closure:
        return None
    index = next((i for i, cell in enumerate(closure) if cell is node.cell), None)
    if index is None:
        return None
    variable = function.__code__.co_freevars[index]
    bound = _global_names_of(function)
    file, line = _source_line(function)
    through = f" (the global {bound[0]!r})" if bound else ""
    # The static findings name it by the variable, as the enclosing function's source does.
    return Holder("closure", f"{bound[0] if bound else function.__qualname__}.<closure {variable}>", file, line,
                  f"closure variable {variable!r} of {function.__qualname__}{through}", aliases=[variable])


def _default_holder(function: types.FunctionType, defaults, node: _Node) -> Holder | None:
    """A mutable default argument (`def remember(out, cache=[])`): made once, when the def ran,
    and shared by every call that does not pass its own."""
    if defaults is function.__kwdefaults__:
        parameter = node.attr
    else:
        index = next((i for i, value in enumerate(defaults) if value is node.below), None)
        if index is None:
            return None
        code = function.__code__
        positional = code.co_varnames[:code.co_argcount][-len(defaults):]  # posonly ones included
        parameter = positional[index]
    if not parameter:
        return None
    file, line = _source_line(function)
    # Named by its function too: a bare `buf` would join static findings on any variable `buf`.
    return Holder("default", f"{function.__qualname__}.<default {parameter}>", file, line,
                  f"mutable default argument {parameter!r} of {function.__qualname__}(): one object, made when "
                  f"the def ran, shared by every call")


def _lru_cache_holder(wrapper) -> Holder:
    """The cache of a functools.lru_cache function: the C wrapper keeps it in a field with no
    attribute, so the cache dict is the wrapper's referent that is not its __dict__."""
    function = getattr(wrapper, "__wrapped__", wrapper)
    name = getattr(function, "__qualname__", None) or getattr(wrapper, "__qualname__", "?")
    try:
        maxsize = wrapper.cache_parameters()["maxsize"]
    except (AttributeError, KeyError, TypeError):
        maxsize = _ABSENT
    bound = ("maxsize=None: it grows without bound" if maxsize is None
             else f"maxsize={maxsize}" if maxsize is not _ABSENT else "")
    file, line = _source_line(wrapper)
    return Holder("cache", f"{name}.<lru_cache>", file, line,
                  f"functools.lru_cache cache of {name}()" + (f" ({bound})" if bound else ""))


def _is_lru_cache(wrapper, child) -> bool:
    # Its other referents: its __dict__ (functools.wraps' attributes) and the wrapped function.
    return child is not getattr(wrapper, "__dict__", None) and not callable(child)


def _assigned_line(obj, name: str) -> int:
    """The first line where `obj`'s source binds `name` by assignment (a class: in its own body;
    a function or code object: anywhere in it), or 0."""
    try:
        lines, start = inspect.getsourcelines(obj)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (TypeError, OSError, SyntaxError, IndentationError):
        return 0
    scope = tree.body[0] if tree.body else None
    if scope is None:
        return 0
    statements = scope.body if isinstance(scope, ast.ClassDef) else ast.walk(scope)
    found = [target.lineno for statement in statements
             if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign))
             for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target])
             if _binds(target, name)]
    return start + min(found) - 1 if found else 0


def _attribute_holding(obj, child) -> str | None:
    """The name of `obj`'s attribute whose value is `child`, for an ordinary instance.

    Since Python 3.11 an instance keeps its attribute values inline and makes its `__dict__`
    only when something asks for it, so the value's referrer is the instance itself, with no
    dict in between (measured on 3.11: `log.history`'s list has the Logger as its referrer until
    `vars(log)` is read). Slot values are held by the instance the same way on every version.
    Reading vars() here makes the dict, as any `obj.__dict__` would.
    """
    if isinstance(obj, _NOT_INSTANCES):
        return None
    try:
        attributes = vars(obj)
    except TypeError:
        attributes = None
    if isinstance(attributes, dict):
        name = next((k for k, v in attributes.items() if v is child and isinstance(k, str)), None)
        if name is not None:
            return name
    return next((name for name, value in _slot_values(obj) if value is child), None)


def _slot_values(obj):
    """(name, value) of every slot set on `obj`, the inherited ones included."""
    for cls in type(obj).__mro__:
        declared = cls.__dict__.get("__slots__", ())
        names = (declared,) if isinstance(declared, str) else declared
        try:
            names = list(names)
        except TypeError:
            continue
        for name in names:
            # Read through the class's own descriptor: a property or __getattr__ of the same
            # name further down the hierarchy would run user code.
            descriptor = cls.__dict__.get(_mangled(cls, name)) if isinstance(name, str) else None
            if not isinstance(descriptor, types.MemberDescriptorType):
                continue
            try:
                yield name, descriptor.__get__(obj, type(obj))
            except AttributeError:
                continue  # declared, never set


def _mangled(cls: type, name: str) -> str:
    """A `__name` slot lives in the class under its private name, `_Class__name`."""
    if name.startswith("__") and not name.endswith("__") and cls.__name__.lstrip("_"):
        return f"_{cls.__name__.lstrip('_')}{name}"
    return name
