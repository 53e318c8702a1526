"""Name what holds a surviving tensor: a ctx attribute, a module attribute, a global, a local.

The walk goes up `gc.get_referrers`, one batched scan per level, and stops at the first named
holder. The probe's own frames and containers are skipped. Tensors that only C++ holds (saved
inside an autograd node) have no Python referrer: they are reported as held by the graph of a
named root when one exists.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import re
import sys
import sysconfig
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
    kind: str  # "ctx", "attribute", "global", "local", "graph", "unknown"
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
    try:
        lines = inspect.getsource(module).splitlines()
    except (TypeError, OSError):
        return 0
    for number, text in enumerate(lines, 1):
        stripped = text.split("#")[0]
        if stripped.startswith((f"{name} =", f"{name}=", f"{name}:")):
            return number
    return 0


@dataclass
class _Node:
    obj: object
    targets: list[int]  # the targets this object is on the way up from (a list holds many)
    attr: str | None  # the nearest dict key on the way up


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
    cls = type(owner)
    file, line = _source_line(cls)
    kind = "module attribute" if isinstance(owner, torch.nn.Module) else "attribute"
    return Holder("attribute", f"{cls.__name__}.{attr}", file, line, f"{kind} {attr!r} of a {cls.__name__}",
                  aliases=[f"{name}.{attr}" for name in _global_names_of(owner)])


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
    """Module-level names bound to `owner` in the user's modules, in import order.

    Only the user's modules: the static check reads only the user's files, and leaving out the
    standard library and installed packages (torch alone is over a thousand modules) keeps the
    scan to the few modules a training script imports from its own tree.
    """
    names: list[str] = []
    for module in list(sys.modules.values()):
        # The dict, not getattr: a module-level __getattr__ (lazy submodules) would run for a missing name.
        file = vars(module).get("__file__") if isinstance(module, types.ModuleType) else None
        if not isinstance(file, str) or not _is_user_file(file):
            continue
        for name, value in list(vars(module).items()):
            if value is owner and not name.startswith("__") and name not in names:
                names.append(name)
    return names


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
        found = next((i for i, text in enumerate(lines) if store.search(text.split("#")[0])), None)
        if found is not None:
            return start + found
    return 0


def find_holders(targets: list, max_depth: int = 7) -> list[Holder | None]:
    """One Holder (or None) per target object."""
    module_dicts = {id(m.__dict__): m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)}
    resolved: dict[int, Holder] = {}
    frontier: dict[int, _Node] = {id(t): _Node(t, [i], None) for i, t in enumerate(targets)}
    ignore: set[int] = {id(targets), id(resolved), id(frontier)}
    seen: set[int] = set(frontier)
    for _ in range(max_depth):
        if not frontier or len(resolved) == len(targets):
            break
        ignore.update(id(n) for n in frontier.values())
        ignore.add(id(frontier))
        objs = [n.obj for n in frontier.values()]
        ignore.add(id(objs))
        referrers = gc.get_referrers(*objs)
        ignore.add(id(referrers))
        del objs
        nxt: dict[int, _Node] = {}
        for r in referrers:
            if id(r) in ignore:
                continue
            if isinstance(r, types.FrameType) and r.f_code.co_filename.startswith(_PROBE_DIR):
                continue
            # The walk's own nodes: one made for an already-seen referrer is dropped from the
            # frontier but still holds its object, and an instance's attributes are now named.
            if isinstance(r, _Node):
                continue
            for child in gc.get_referents(r):
                node = frontier.get(id(child))
                if node is None or all(t in resolved for t in node.targets):
                    continue
                holder, up = _classify(r, child, node, module_dicts)
                if holder is not None:
                    for target in node.targets:
                        resolved.setdefault(target, holder)
                elif up is not None and id(r) in nxt:
                    # A second item of the same container: it is named with the first.
                    nxt[id(r)].targets.extend(node.targets)
                elif up is not None and id(r) not in seen:
                    seen.add(id(r))
                    nxt[id(r)] = up
        del referrers
        frontier = nxt
    return [resolved.get(i) for i in range(len(targets))]


def _classify(r, child, node: _Node, module_dicts) -> tuple[Holder | None, _Node | None]:
    if isinstance(r, dict):
        key = next((k for k, v in r.items() if v is child), None)
        if not isinstance(key, str):
            key = node.attr
        module = module_dicts.get(id(r))
        if module is not None:
            if key is None or key.startswith("__"):
                return None, None
            file = getattr(module, "__file__", "") or ""
            return Holder("global", key, file, _global_line(module, key),
                          f"module-level {type(child).__name__} {key!r} in {module.__name__}"), None
        return None, _Node(r, list(node.targets), key)
    if isinstance(r, types.FrameType):
        name = next((k for k, v in r.f_locals.items() if v is child), node.attr or "?")
        return Holder("local", name, r.f_code.co_filename, r.f_lineno,
                      f"local {name!r} of {r.f_code.co_name}() (a frame still running)"), None
    if getattr(r, "__dict__", None) is child and node.attr:
        holder = _holder_for_owner(r, node.attr)
        if holder is not None:
            return holder, None
    attr = _attribute_holding(r, child)
    if attr is not None:
        holder = _holder_for_owner(r, attr)
        if holder is not None:
            return holder, None
    for registry in ("_buffers", "_parameters", "_modules"):
        if getattr(r, registry, None) is child and node.attr:
            return _holder_for_owner(r, node.attr), None
    if isinstance(r, _CONTAINERS) or type(r).__name__ in ("deque", "cell", "OrderedDict"):
        return None, _Node(r, list(node.targets), node.attr)
    if isinstance(r, (types.FunctionType, types.ModuleType, type)):
        return None, None
    return None, None


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
