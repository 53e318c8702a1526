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
import textwrap
import threading
import types
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import graph
from .places import is_user_file
from .verdict import leak_start

if TYPE_CHECKING:
    from .tracker import LiveStorageTracker, StorageRecord

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
    count: int = 1  # attributes of one kind this holder stands for (`Memory.slot*`: slot0..slot29)

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
    # What the walk passed through below the holder, said in the holder's detail: "StepOutput
    # objects (.logits)", "exceptions whose tracebacks pin the finished frame of f() (x, y)".
    through: str = ""

    @property
    def key(self) -> tuple:
        # Two ways up through one object are kept apart when they would be named differently:
        # merged, an instance's second attribute would be named (and charged) as its first.
        return id(self.obj), self.attr, id(self.cell), self.via_key


def _holder_for_owner(owner, attr: str) -> Holder | None:
    import torch

    if isinstance(owner, torch.autograd.function.BackwardCFunction):
        function = node_function(owner)
        if function is None:
            name = type(owner).__name__
            return Holder("ctx", f"{name}.ctx.{attr}", detail=f"ctx attribute of {name}")
        # The store itself, where the static finding points: forward's def line when not found.
        stored = _ctx_store_line(function, attr)
        where = "defined" if function.op else "forward"
        return Holder("ctx", f"{function.name}.ctx.{attr}", function.file, stored or function.line,
                      f"ctx attribute of {type(owner).__name__} -> {function.what}, {where} at "
                      f"{display_path(function.file)}:{function.line}")
    if isinstance(owner, (type, types.ModuleType)):
        return None
    holder = _instance_attribute(owner, attr, "module attribute" if isinstance(owner, torch.nn.Module) else "attribute")
    return _numbered(holder, owner, attr)


_NUMBERED = re.compile(r"^(.*?)(\d+)$")
# Siblings that make a numbered attribute one of a kind: `slot0`..`slot29` registered one per step.
NUMBERED_KIND = 3


def _numbered(holder: Holder, owner, attr: str) -> Holder:
    """Many attributes of one kind (`self.register_buffer(f"slot{step}", x)` every step) are one
    holder, `Memory.slot*` with their count, not one of them picked at random (`Memory.slot10`)."""
    match = _NUMBERED.match(attr)
    if not match or not match.group(1):
        return holder
    prefix = match.group(1)
    names = set()
    attrs = getattr(owner, "__dict__", None)
    for space in [attrs] + [dict.get(attrs, r) for r in _REGISTRIES] if type(attrs) is dict else []:
        if type(space) is dict:
            names.update(k for k in dict.keys(space) if isinstance(k, str) and k.startswith(prefix)
                         and k[len(prefix):].isdigit())
    if len(names) < NUMBERED_KIND:
        return holder
    ordered = sorted(names, key=lambda k: int(k[len(prefix):]))
    pattern = f"{prefix}*"
    holder.subject = holder.subject[: -len(attr)] + pattern
    holder.aliases = [a[: -len(attr)] + pattern if a.endswith(attr) else a for a in holder.aliases]
    holder.count = len(names)
    holder.detail = (f"{len(names)} attributes of one kind, {ordered[0]} to {ordered[-1]}: "
                     + holder.detail.replace(repr(attr), repr(pattern), 1))
    return holder


def _instance_attribute(owner, attr: str, kind: str) -> Holder:
    cls = type(owner)
    bindings = _global_bindings(owner)
    aliases = [f"{name}.{attr}" for _, name in bindings]
    # The names the user's running code has for it (`net = Net()` in main()): the static finding
    # says `net.seen.append(loss)`, and the join tries these too.
    aliases += [f"{name}.{attr}" for name in _local_names_of(owner) if f"{name}.{attr}" not in aliases]
    if isinstance(owner, types.FunctionType):  # `record.outputs = []` on a def: named by the def
        subject = f"{owner.__qualname__}.{attr}"
        code = owner.__code__
        return Holder("attribute", subject, code.co_filename, code.co_firstlineno,
                      f"{kind} {attr!r} of the function {owner.__qualname__}",
                      aliases=[a for a in aliases if a != subject])
    file, line = _source_line(cls)
    if not file or is_user_file(file):
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
        # isinstance: torch 2.4.1 keeps _modules and _parameters in OrderedDicts (2.13: dicts).
        instances = _holders_of_dict(referrer) if isinstance(referrer, dict) else [referrer]
        for instance in instances:
            if isinstance(instance, _NOT_INSTANCES) or not hasattr(instance, "__dict__"):
                continue
            module = sys.modules.get(type(instance).__module__)
            file = vars(module).get("__file__") if isinstance(module, types.ModuleType) else None
            if isinstance(file, str) and is_user_file(file):
                attrs = vars(instance)
                name = next((k for k, v in dict.items(attrs) if v is owner and isinstance(k, str)), None)
                for registry in _REGISTRIES:  # a submodule is kept in the module's _modules
                    held = dict.get(attrs, registry)
                    if name is None and isinstance(held, dict):
                        name = next((k for k, v in dict.items(held) if v is owner and isinstance(k, str)), None)
                if name is not None:
                    return type(instance), name
    return None


def _torch_container_of(module):
    """The nn.ModuleList / Sequential / ModuleDict that keeps `module` in its _modules, if one does."""
    for referrer in gc.get_referrers(module):
        if isinstance(referrer, dict):  # an OrderedDict _modules on torch 2.4.1
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


def _local_names_of(owner) -> list[str]:
    """Local names bound to `owner` in the user's frames still running, on any thread, innermost
    first, each name once."""
    names: list[str] = []
    for frame in _running_frames() + _other_threads_user_frames():
        if not is_user_file(frame.f_code.co_filename) or frame.f_code.co_filename.startswith(_PROBE_DIR):
            continue
        names.extend(name for name, value in _frame_items(frame)
                     if value is owner and name not in names and name != "self")
    frame = None  # no frame kept past the return: see _other_threads_user_frames
    return names


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
        if not isinstance(file, str) or not is_user_file(file):
            continue
        for name, value in list(vars(module).items()):
            if value is owner and not name.startswith("__") and all(name != seen for _, seen in bindings):
                bindings.append((module, name))
    return bindings


@dataclass
class NodeFunction:
    """The user's function behind an autograd node: a custom Function's class, or for a
    `torch.library.custom_op` the op (torch generates the node's class in torch/_library/, which
    is not the user's to change: the op's Python function and its setup_context are)."""

    name: str  # as the static findings name it: "KNNScatter", or the op's function "scaled_sig"
    file: str
    line: int  # the forward's (or the op function's) def line
    methods: list  # where ctx is filled: forward and setup_context, or the op's setup_context
    op: str = ""  # "mylib::scaled_sig" for a custom op

    @property
    def what(self) -> str:
        return f"the custom op {self.op} ({self.name})" if self.op else f"Function {self.name}"


def node_function(node) -> NodeFunction | None:
    """The NodeFunction of a custom Function's node (a BackwardCFunction), else None."""
    fn_cls = getattr(type(node), "_forward_cls", None)
    if fn_cls is None:
        return None
    op = _custom_op_parts(fn_cls)
    if op is not None:
        qualname, function, setup = op
        file, line = _source_line(function)
        return NodeFunction(getattr(function, "__name__", qualname), file, line, [m for m in (setup,) if m], qualname)
    file, line = _source_line(fn_cls.forward)
    methods = [fn_cls.__dict__.get(m, getattr(fn_cls, m, None)) for m in ("forward", "setup_context")]
    return NodeFunction(fn_cls.__name__, file, line, [m for m in methods if m is not None])


def _custom_op_parts(fn_cls: type):
    """(qualified name, the op's Python function, its setup_context) of the class torch made
    for a custom op's autograd (torch/_library/autograd.py: its forward closes over `op` and
    `info`; measured on torch 2.13), or None for any other class."""
    if not getattr(fn_cls, "__module__", "").startswith("torch._library"):
        return None
    forward = getattr(fn_cls.__dict__.get("forward"), "__func__", None)
    closure = getattr(forward, "__closure__", None)
    if not closure:
        return None
    try:
        free = dict(zip(forward.__code__.co_freevars, (c.cell_contents for c in closure)))
    except ValueError:  # an empty cell
        return None
    op, info = free.get("op"), free.get("info")
    qualname = getattr(getattr(op, "_schema", None), "name", "")
    if not qualname:
        return None
    function = None
    try:
        from torch._library.custom_ops import OPDEFS

        definition = OPDEFS.get(qualname)
        function = getattr(definition, "_init_fn", None)
    except ImportError:
        pass
    return qualname, function or op, getattr(info, "_setup_context_fn", None)


def _ctx_store_line(function: NodeFunction | type, attr: str) -> int:
    """The line of `ctx.<attr> = ...` in the Function's forward or setup_context (its first
    parameter, whatever it is called), or 0."""
    return _first_line(function, lambda ctx: [rf"\b{re.escape(ctx)}\.{re.escape(attr)}\s*(?:=(?!=)|\+=)",
                                              # `setattr(ctx, name, value)` with a name made at run time
                                              rf"\bsetattr\(\s*{re.escape(ctx)}\s*,"])


def _save_call_line(function: NodeFunction | type) -> int:
    """The line of `ctx.save_for_backward(...)` in the Function's forward or setup_context, or 0."""
    return _first_line(function, lambda ctx: [rf"\b{re.escape(ctx)}\.save_for_backward\("])


def _first_line(function, patterns) -> int:
    if isinstance(function, type):  # a Function class itself
        methods = [function.__dict__.get(m, getattr(function, m, None)) for m in ("forward", "setup_context")]
        function = NodeFunction(function.__name__, "", 0, [m for m in methods if m is not None])
    for method in function.methods:
        method = getattr(inspect.unwrap(method), "__func__", method)  # a staticmethod object
        method = inspect.unwrap(method)
        try:
            lines, start = inspect.getsourcelines(method)
            ctx = next(iter(inspect.signature(method).parameters))
        except (TypeError, OSError, ValueError, StopIteration):
            continue
        for pattern in patterns(ctx):
            compiled = re.compile(pattern)
            found = next((i for i, text in enumerate(lines) if compiled.search(text.split("#")[0])), None)
            if found is not None:
                return start + found
    return 0


def find_holders(targets: list, max_depth: int = 8) -> list[Holder | None]:
    """One Holder (or None) per target object.

    A target reached as a dict key (a parameter keying an optimizer's state) is named that way
    only when no path through values names it: the key is how a library finds its own state,
    the value is where the user put the object (`opt.param_groups` for a parameter group).
    """
    module_dicts = {id(m.__dict__): m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)}
    # Since 3.11 a running function's frame is no gc-tracked object, so gc.get_referrers never
    # returns it: the training loop's `losses` list was unnamed (measured on 3.11.7). The user's
    # frames on this thread's stack are asked directly.
    frames = [f for f in _running_frames() if is_user_file(f.f_code.co_filename)
              and not f.f_code.co_filename.startswith(_PROBE_DIR)]
    resolved: dict[int, Holder] = {}
    by_key: dict[int, Holder] = {}
    walked: dict[tuple, set[int]] = {}
    trail: list[_Node] = []  # every node made: keeps its object, so no id in `walked` is reused
    frontier: dict[int, list[_Node]] = {}
    for i, t in enumerate(targets):
        _climb(frontier, walked, trail, _Node(t, [], None), [i])
    ignore: set[int] = {id(targets), id(resolved), id(by_key), id(trail)}
    walk = _Walk(module_dicts, _all_running_frames(), ignore)
    walk.frame_locals = {_emptied_locals(f) for f in frames + _other_threads_user_frames()}
    for _ in range(max_depth):
        if not frontier or len(resolved) == len(targets):
            break
        ignore.add(id(frontier))
        objs = [nodes[0].obj for nodes in frontier.values()]
        ignore.add(id(objs))
        referrers = gc.get_referrers(*objs)
        ignore.add(id(referrers))
        del objs
        # Running frames last: a name elsewhere (a global, an attribute) is the one to report.
        referrers.extend(f for f in frames if any(id(v) in frontier for v in _frame_values(f)))
        nxt: dict[int, list[_Node]] = {}
        for r in referrers:
            if id(r) in ignore or _is_probe_own(r):
                continue
            for child in (_frame_values(r) if isinstance(r, types.FrameType) else gc.get_referents(r)):
                for node in frontier.get(id(child), ()):
                    pending = [t for t in node.targets if t not in resolved]
                    if not pending:
                        continue
                    holder, up = _classify(r, child, node, walk)
                    if holder is not None:
                        if node.through and node.through not in holder.detail:
                            holder.detail += f"; it keeps {node.through}"
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
        same.through = _merged_through(same.through, node.through)
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


@dataclass
class _Walk:
    module_dicts: dict[int, types.ModuleType]
    running: set[int]  # ids of the frames on any thread's stack now
    ignore: set[int]  # the walk's own objects
    in_container: dict[int, bool] = field(default_factory=dict)  # _value_object_in_container, per object
    # The f_locals dicts of the user's running frames: reading f_locals (as this walk does) leaves
    # the dict on the frame, and a local variable is no container an object was put in (measured
    # on 3.11: `metrics` of a running main() had its frame's locals dict as a referrer).
    frame_locals: set[int] = field(default_factory=set)


def _all_running_frames() -> set[int]:
    running = set()
    for frame in sys._current_frames().values():
        while frame is not None:
            running.add(id(frame))
            frame = frame.f_back
    return running


def _other_threads_user_frames() -> list:
    """The user's frames running on other threads."""
    return [frame for frame in _other_threads_frames()
            if is_user_file(frame.f_code.co_filename) and not frame.f_code.co_filename.startswith(_PROBE_DIR)]


def _other_threads_frames() -> list:
    """Every frame running on another thread, each stack from its top.

    A local of a probe function must never hold that function's own frame when it returns: the
    probe pauses the cyclic collector, so the frame and every local it had would live on until
    the next collection. One did (`me = sys._getframe()`), and the (name, value) pairs of
    main()'s locals it kept read as a container holding the user's MetricTracker: the holder was
    named `metrics` instead of `MetricTracker.total`, in some runs and not others. So this
    thread's stack is left out of sys._current_frames() before any loop runs over it."""
    found = []
    tops = sys._current_frames()
    tops.pop(threading.get_ident(), None)
    for frame in tops.values():
        while frame is not None:
            found.append(frame)
            frame = frame.f_back
    return found


def _up(node: _Node, r, child, through: str = "") -> _Node:
    return _Node(r, [], node.attr, node.cell, node.via_key, below=child, through=node.through or through)


def _classify(r, child, node: _Node, walk: _Walk) -> tuple[Holder | None, _Node | None]:
    module_dicts = walk.module_dicts
    if isinstance(r, dict):
        return _through_dict(r, child, node, module_dicts)
    if isinstance(r, types.FrameType):
        if id(r) not in walk.running and not r.f_code.co_flags & _SUSPENDABLE_FLAGS:
            # A frame that has finished: kept by a traceback (an exception someone keeps); the
            # holder is whatever keeps the exception, and the frame's variables are what it pins.
            return None, _up(node, r, child, _finished_frame(r))
        return _local_holder(r, child, node, owner=None), None
    if isinstance(r, (types.TracebackType, BaseException)):
        return None, _up(node, r, child)
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
        if _value_object_in_container(r, node.below, walk):
            return None, _Node(r, [], None, node.cell, node.via_key, below=child,
                               through=node.through or _objects_of(r, node.attr))
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
        if _value_object_in_container(r, child, walk):
            return None, _Node(r, [], None, node.cell, node.via_key, below=child,
                               through=node.through or _objects_of(r, attr))
        holder = _holder_for_owner(r, attr)
        if holder is not None:
            return holder, None
    if isinstance(r, types.FunctionType):
        if child is r.__defaults__ or child is r.__kwdefaults__:
            return _default_holder(r, child, node), None
        return _closure_holder(r, child, node), None
    if isinstance(r, types.CellType):
        return None, _Node(r, [], node.attr, r, node.via_key, below=child, through=node.through)
    if isinstance(r, _CONTAINERS) or type(r).__name__ in ("deque", "OrderedDict"):
        return None, _up(node, r, child)
    return None, None


_SUSPENDABLE_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _finished_frame(frame) -> str:
    """"exceptions whose tracebacks pin the finished frame of f() at line 12 (hidden, scores)"."""
    import torch

    pinned = [name for name, value in _frame_items(frame) if isinstance(value, torch.Tensor)]
    names = f" ({', '.join(pinned)})" if pinned else ""
    return (f"exceptions whose tracebacks pin the finished frame of {frame.f_code.co_name}() at "
            f"{display_path(frame.f_code.co_filename)}:{frame.f_lineno}{names}")


def _frame_items(frame) -> list:
    """A frame's locals, (name, value). Through Python 3.12 reading `f_locals` leaves a dict on a
    function's frame holding every local's value as of that read, until the next read: a batch
    tensor in the loop's local outlived its step because the probe had looked at the frame at a
    collection (+512 B once in a 40-step run, read as 21 B/step of a 4 B/step leak). So the copy is
    emptied once read; the next read fills it again. Not for a module's or a class body's frame,
    whose f_locals is their real namespace; from 3.13 f_locals is a view that keeps nothing."""
    try:
        namespace = frame.f_locals
        items = list(namespace.items())
    except Exception:  # noqa: BLE001 - a frame's locals proxy can fail on odd frames: none then
        return []
    _empty_copy(frame, namespace)
    return items


def _empty_copy(frame, namespace) -> None:
    """Empty `namespace`, the dict frame.f_locals gave, where it is a copy. Not on a frame another
    thread is running: a tracer there (a debugger) may be between its own read and its write-back."""
    if type(namespace) is not dict or not frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        return
    if any(running is frame for running in _other_threads_frames()):
        return
    namespace.clear()


def _objects_of(owner, attr: str) -> str:
    return f"{type(owner).__name__} objects (their .{attr})"


def _merged_through(first: str, second: str) -> str:
    """One object reached from two of its fields: "StepOutput objects (their .loss, .logits)"."""
    if not second or first == second or not first:
        return first or second
    head, sep, fields = first.rpartition(" (their ")
    other_head, other_sep, other = second.rpartition(" (their ")
    if sep and other_sep and head == other_head:
        names = list(dict.fromkeys(fields.rstrip(")").split(", ") + other.rstrip(")").split(", ")))
        return f"{head} (their {', '.join(names)})"
    return first


def _value_object_in_container(owner, value, walk: _Walk) -> bool:
    """Whether the walk should go on through `owner`, an object that holds the tensor `value` in
    an attribute and is itself an item of a list, tuple, set or dict: a model output kept per
    step (`outputs.append(StepOutput(loss, logits))`), whose field names nothing the user would
    clear; the container is the root. An object that keeps a list of tensors (`Logger.history`),
    or is not in a container, is named by its attribute as before. Not torch's own objects (a
    Module, an optimizer, autograd's ctx): they are named by their attribute or their user."""
    import torch

    if not isinstance(value, torch.Tensor) or isinstance(owner, (torch.nn.Module, torch.Tensor, torch.optim.Optimizer,
                                                                 torch.autograd.function.BackwardCFunction)):
        return False
    if type(owner).__module__.split(".")[0] == "torch":
        return False
    known = walk.in_container.get(id(owner))
    if known is None:
        known = walk.in_container[id(owner)] = _in_a_container(owner, walk)
    return known


def _in_a_container(owner, walk: _Walk) -> bool:
    for referrer in gc.get_referrers(owner):
        if id(referrer) in walk.ignore or isinstance(referrer, _Node):
            continue
        if isinstance(referrer, (list, tuple, set, frozenset)) or type(referrer).__name__ == "deque":
            return True
        if (type(referrer) is dict and id(referrer) not in walk.module_dicts
                and any(v is owner for v in dict.values(referrer)) and id(referrer) not in walk.frame_locals):
            return True
    return False


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
    return None, _Node(r, [], key, node.cell, node.via_key or as_key, below=child, through=node.through)


def _local_holder(frame: types.FrameType, child, node: _Node, owner) -> Holder:
    """A local of a running frame, or of a suspended generator or coroutine (`owner`)."""
    # A local that an inner function captured is held through its cell; f_locals shows the contents.
    held = _cell_contents(child) if isinstance(child, types.CellType) else child
    name = next((k for k, v in _frame_items(frame) if v is held), node.attr or "?")
    code = frame.f_code
    if owner is None:
        # The line that makes the local (`losses = []`), where the user changes it; the frame's
        # current line (the optimizer step it waits in) says only where the loop is.
        return Holder("local", name, code.co_filename, _assigned_line(code, name) or frame.f_lineno,
                      f"local {name!r} of {code.co_name}() (a frame still running, at line {frame.f_lineno})")
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


# -- naming the holders of what a run kept (runner.py measures, decide.py judges, this names) ------
# Storages are grouped by the line that made them and one holder is named per line; what no Python
# object refers to goes to the named holder whose graph keeps it.

def record_site(record: "StorageRecord") -> str:
    return f"{display_path(record.file)}:{record.line} ({record.op})"


def tensors_by_storage(tracker: "LiveStorageTracker", keys: set[int]) -> dict[int, list]:
    found: dict[int, list] = defaultdict(list)
    for t in tracker.live_tensors():
        key = tracker.storage_key(t)
        if key in keys:
            found[key].append(t)
    missing = keys - found.keys()
    if missing:
        # A tensor object no op returned shares the storage: `nn.Parameter(torch.zeros(n))` makes
        # a new Python object on the zeros' storage, and the zeros tensor itself is gone. Only the
        # collector's list of objects finds it (once, for what is still unnamed).
        import torch

        for obj in gc.get_objects():
            # type(), not isinstance: isinstance reads __class__, which some module objects warn on
            if issubclass(type(obj), torch.Tensor):
                key = tracker.storage_key(obj)
                if key in missing:
                    found[key].append(obj)
    return found


def holders_for(tracker: "LiveStorageTracker", records: dict[int, "StorageRecord"],
                 keys_per_site: int = 2, tensors_per_site: int = 6) -> dict[str, tuple[Holder, list[int]]]:
    """Group records by creation site, name one holder per site: {subject: (holder, keys)}."""
    by_site: dict[str, list[int]] = defaultdict(list)
    for key, record in records.items():
        by_site[record_site(record)].append(key)
    tensors = tensors_by_storage(tracker, set(records))
    sites, targets = [], []
    for site, keys in by_site.items():
        # Every tensor on the storage: a view on ctx holds the storage while its base has no
        # Python referrer at all.
        # The oldest storages of the site too: the newest may still be the loop's current batch,
        # a local that names no leak (`x`, beside the producer's list that keeps every batch).
        chosen = list(dict.fromkeys(keys[:keys_per_site] + keys[-keys_per_site:]))
        picked = [t for k in chosen for t in tensors.get(k, ())][:2 * tensors_per_site]
        for t in picked:
            sites.append(site)
            targets.append(t)
    del tensors
    holders = find_holders(targets) if targets else []
    del targets
    site_holder: dict[str, Holder] = {}
    for site, holder in zip(sites, holders):
        # A running frame's local is a holder only when nothing else keeps the site's storages.
        if holder is not None and (site not in site_holder or site_holder[site].kind == "local" != holder.kind):
            site_holder[site] = holder
    grouped: dict[str, tuple[Holder, list[int]]] = {}
    for site, keys in by_site.items():
        holder = site_holder.get(site) or Holder("unknown", "", detail="no Python referrer: held inside the autograd graph or by C++")
        subject = holder.subject or f"<unnamed {site}>"
        entry = grouped.setdefault(subject, (holder, []))
        entry[1].extend(keys)
        if site not in entry[0].created_at:
            entry[0].created_at.append(site)
    return grouped


def name_reclaim_candidates(tracker: "LiveStorageTracker", warmup: int, step: int):
    # Storages from earlier steps of this window still alive before collection, named now:
    # after gc.collect() the ones in a cycle are gone.
    candidates = {k: r for k, r in list(tracker.records.items()) if warmup < r.step < step and r() is not None}
    # What no Python object refers to but a named holder's graph saves (the batch a layer saved,
    # in the graph of an output kept on ctx) is that holder's, freed with it.
    return candidates, (adopt_unreferenced(tracker, holders_for(tracker, candidates), []) if candidates else {})


def reclaimed(pending, window: int) -> list[Holder]:
    candidates, grouped = pending
    holders = []
    for holder, keys in grouped.values():
        freed = [candidates[k] for k in keys if candidates[k]() is None]
        if freed:
            holder.bytes_per_step = sum(r.nbytes for r in freed) / max(1, window)
            holder.verdict = "delayed-free"
            holders.append(holder)
    holders.sort(key=lambda h: -h.bytes_per_step)
    return holders


def attribute_survivors(tracker: "LiveStorageTracker", survivors: list["StorageRecord"], run,
               named_roots: list[tuple[object, Holder]]) -> list[Holder]:
    if not survivors:
        return []
    records = {id(r): r for r in survivors}
    keyed = {k: r for k, r in list(tracker.records.items()) if id(r) in records}
    records = keyed
    last = run.steps_done - 2
    measured = max(1, run.tracked_between(run.warmup, last))
    holders = []
    grouped = adopt_unreferenced(tracker, holders_for(tracker, records), named_roots)
    grouped = saved_by_nodes(tracker, grouped)
    for holder, keys in grouped.values():
        # A holder that began to fill late is measured from then, as the headline is.
        start = leak_start({records[k].step for k in keys}, run.warmup + 1, last,
                           lambda s: run.tracked_between(s - 1, last))
        since = max(1, run.tracked_between(start - 1, last)) if start is not None else measured
        holder.bytes_per_step = sum(records[k].nbytes for k in keys) / since
        holder.verdict = "retained"
        holders.append(holder)
    holders.sort(key=lambda h: -h.bytes_per_step)
    return holders


def adopt_unreferenced(tracker: "LiveStorageTracker", grouped: dict[str, tuple[Holder, list[int]]],
                        named_roots: list[tuple[object, Holder]]) -> dict[str, tuple[Holder, list[int]]]:
    """Storages with no Python referrer belong to the named holder that keeps them, not to
    '(unnamed)': what its graph saves (a branch backward never ran through, a state carried
    across steps), and the `.grad` of a tensor it holds (a kept parameter's gradient, or a
    retain_grad() tensor's: torch keeps it in C++, beside the tensor)."""
    unnamed = [subject for subject, (holder, _) in grouped.items() if not holder.subject]
    if not unnamed:
        return grouped
    owner: dict[int, tuple[Holder, str]] = {}
    seen: set[int] = set()  # shared: a node reachable from several roots is read once
    keep: list = []  # the node wrappers, so ids in `seen` stay unique
    for root, holder in named_roots:
        for t in graph.saved_tensors(root, seen, keep):
            owner.setdefault(tracker.storage_key(t), (holder, "saved in the graph"))
    named = {key: holder for holder, keys in grouped.values() if holder.subject for key in keys}
    for key, tensors in tensors_by_storage(tracker, set(named)).items():
        for t in tensors:
            # .grad of a non-leaf warns and is None, unless retain_grad() asked for it
            grad = t.grad if t.is_leaf or t.retains_grad else None
            if grad is not None:
                owner.setdefault(tracker.storage_key(grad), (named[key], "the .grad of a tensor it holds"))
            # A view kept on ctx holds its base, whose graph no Python object names: what that
            # graph saves (a leaf made in the step, and its .grad) is the view's holder's too.
            for root in (t, t._base):
                if root is not None and root.grad_fn is not None:
                    for kept in graph.saved_tensors(root, seen, keep):
                        owner.setdefault(tracker.storage_key(kept), (named[key], "saved in the graph"))
    for subject in unnamed:
        keys = grouped[subject][1]
        for key in (k for k in keys if k in owner):
            holder, how = owner[key]
            entry = grouped.setdefault(holder.subject, (holder, []))
            entry[1].append(key)
            site = f"{record_site(tracker.records[key])}, {how}"
            if site not in entry[0].created_at:
                entry[0].created_at.append(site)
        keys[:] = [k for k in keys if k not in owner]
        if not keys:
            del grouped[subject]
    return grouped


def saved_by_nodes(tracker: "LiveStorageTracker", grouped: dict[str, tuple[Holder, list[int]]]
                   ) -> dict[str, tuple[Holder, list[int]]]:
    """What is still unnamed and saved inside an autograd node: named by the node's Function.

    A custom Function that saves a view of its own output (`ctx.save_for_backward(out[:, :1])`)
    in a graph backward never runs keeps the output, its node and everything it saved alive
    through C++ (the view's base is the output, whose grad_fn is the node that saved the view:
    measured on torch 2.13, 0 of 40 freed by gc.collect()). No Python object refers to any of
    it; the output's tensor object is alive only because C++ keeps it, and its grad_fn is the
    node. Every node reachable from the live tensors is read once for what it saved."""
    unnamed = [subject for subject, (holder, _) in grouped.items() if not holder.subject]
    if not unnamed:
        return grouped
    wanted = {k for subject in unnamed for k in grouped[subject][1]}
    savers: dict[int, tuple[object, object]] = {}  # storage key -> (node, the saved tensor)
    seen: set[int] = set()
    keep = []  # the node wrappers, so ids in `seen` stay unique while walking
    for root in graph.graph_roots(tracker.live_tensors()):
        for node, saved in graph.saved_by_node(root, seen, keep):
            key = tracker.storage_key(saved)
            if key in wanted:
                savers.setdefault(key, (node, saved))
    if not savers:
        return grouped
    outputs = {}  # storage key -> the node whose output lives on it
    for t in tracker.live_tensors():
        key = tracker.storage_key(t)
        if key in wanted and t.grad_fn is not None:
            outputs.setdefault(key, t.grad_fn)
    # Per node, the saved tensor that says most about why it stays: a view of its own output
    # (the cycle), then its own output, then any other.
    best: dict[int, tuple[int, object, object]] = {}
    for key, (node, saved) in savers.items():
        rank = 0 if outputs.get(key) is node and saved._base is not None else 1 if outputs.get(key) is node else 2
        if id(node) not in best or rank < best[id(node)][0]:
            best[id(node)] = (rank, node, saved)
    by_node: dict[int, Holder] = {}
    for subject in unnamed:
        keys = grouped[subject][1]
        for key in [k for k in keys if k in savers]:
            node = savers[key][0]
            holder = by_node.get(id(node))
            if holder is None:
                rank, _, saved = best[id(node)]
                holder = by_node[id(node)] = _saved_holder(node, saved, node if rank < 2 else None)
            entry = grouped.setdefault(holder.subject, (holder, []))
            entry[1].append(key)
            site = record_site(tracker.records[key])
            if site not in entry[0].created_at:
                entry[0].created_at.append(site)
        keys[:] = [k for k in keys if k not in savers]
        if not keys:
            del grouped[subject]
    del keep
    return grouped


def _saved_holder(node, saved, output_node) -> Holder:
    """A node that still holds what it saved: by its Function and by what the tensor is to it."""
    import torch

    own_output = output_node is node
    # Still readable: backward never released it (it runs once and frees the saved tensors).
    never = "backward never ran on its graph (or ran with retain_graph=True)"
    function = node_function(node) if isinstance(node, torch.autograd.function.BackwardCFunction) else None
    if function is not None:
        what = ("a view of its own output" if own_output and saved._base is not None
                else "its own output" if own_output else "a tensor")
        stored = _save_call_line(function)
        return Holder("graph", f"{function.name}.saved_tensors", function.file, stored or function.line,
                      f"{function.name} saved {what}; {never}: the saved tensors keep the node and its output alive"
                      + (f" ({function.what}, at {display_path(function.file)}:{function.line})" if function.file else ""))
    name = type(node).__name__
    what = "its own output" if own_output else "a tensor"
    return Holder("graph", f"{name}.saved", "", 0, f"torch's {name} saved {what}; {never}")


def by_subject(holders) -> list[Holder]:
    """The first holder of each name, in order."""
    out: dict[str, Holder] = {}
    for holder in holders:
        out.setdefault(holder.subject, holder)
    return list(out.values())


def name_holders(decision, run, tracker: "LiveStorageTracker") -> list[Holder]:
    """The holders that explain `decision` (decide.Decision), named from the run's evidence while
    the tracker and the tensors are still alive; none for a clean run."""
    source = decision.holder_source
    if source == "reclaimed":
        return list(run.reclaimed_holders)
    if source not in ("retained", "regrown"):
        return []
    # Only roots whose graph reaches back before the last two steps: the latest step's
    # own `loss` and `logits` are no holders of what grew, a `total_loss` chain is.
    roots = [t for t in graph.graph_roots(tracker.live_tensors())
             if graph.reachable_nodes([t], run.node_ranges[:-2])]
    named_roots = [(t, h) for t, h in zip(roots, find_holders(roots) if roots else []) if h is not None]
    del roots
    if source == "regrown":
        holders = []
        if run.newest_regrown is not None:
            grouped = holders_for(tracker, {run.newest_regrown.key: run.newest_regrown})
            holders = [holder for holder, _ in grouped.values() if holder.subject]
        for h in holders:
            h.bytes_per_step, h.verdict = decision.regrown_bytes, "retained"
    else:
        holders = attribute_survivors(tracker, run.survivors, run, named_roots)
    if decision.graph_grows:
        add_graph_holders(holders, by_subject(h for _, h in named_roots), decision.graph_nodes_per_step)
    return holders


def add_graph_holders(holders: list[Holder], graph_holders: list[Holder], node_slope: float) -> None:
    """Give the growing graph's nodes to the holder already named for bytes, or add its own."""
    for h in graph_holders:
        existing = next((x for x in holders if x.subject == h.subject), None)
        target = existing or h
        target.graph_nodes_per_step = node_slope
        target.verdict = "retained"
        if existing is None:
            holders.append(h)


def _running_frames() -> list:
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


def _emptied_locals(frame) -> int:
    """The id of a frame's f_locals dict, left empty where it is a copy (see _frame_items): a copy
    filled by an earlier read (ours, a debugger's) is no container the user put a value in."""
    namespace = frame.f_locals
    _empty_copy(frame, namespace)
    return id(namespace)


def _frame_values(frame) -> list:
    return [value for _, value in _frame_items(frame)]
