"""Name what holds a surviving tensor: a ctx attribute, a module attribute, a global, a local.

The walk goes up `gc.get_referrers`, one batched scan per level, and stops at the first named
holder. The probe's own frames and containers are skipped. Tensors that only C++ holds (saved
inside an autograd node) have no Python referrer: they are reported as held by the graph of a
named root when one exists.
"""

from __future__ import annotations

import gc
import inspect
import os
import sys
import types
from dataclasses import dataclass, field

_PROBE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_CONTAINERS = (list, tuple, set, frozenset, dict)


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
    target: int
    attr: str | None  # the nearest dict key on the way up


def _holder_for_owner(owner, attr: str) -> Holder | None:
    import torch

    if isinstance(owner, torch.autograd.function.BackwardCFunction):
        fn_cls = getattr(type(owner), "_forward_cls", None)
        name = fn_cls.__name__ if fn_cls else type(owner).__name__
        file, line = _source_line(fn_cls.forward) if fn_cls else ("", 0)
        return Holder("ctx", f"{name}.ctx.{attr}", file, line,
                      f"ctx attribute of {type(owner).__name__} -> Function {name}, forward at {display_path(file)}:{line}")
    if isinstance(owner, type) or isinstance(owner, types.ModuleType):
        return None
    cls = type(owner)
    file, line = _source_line(cls)
    kind = "module attribute" if isinstance(owner, torch.nn.Module) else "attribute"
    return Holder("attribute", f"{cls.__name__}.{attr}", file, line, f"{kind} {attr!r} of a {cls.__name__}")


def find_holders(targets: list, max_depth: int = 7) -> list[Holder | None]:
    """One Holder (or None) per target object."""
    module_dicts = {id(m.__dict__): m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)}
    resolved: dict[int, Holder] = {}
    frontier: dict[int, _Node] = {id(t): _Node(t, i, None) for i, t in enumerate(targets)}
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
            for child in gc.get_referents(r):
                node = frontier.get(id(child))
                if node is None or node.target in resolved:
                    continue
                holder, up = _classify(r, child, node, module_dicts)
                if holder is not None:
                    resolved[node.target] = holder
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
        return None, _Node(r, node.target, key)
    if isinstance(r, types.FrameType):
        name = next((k for k, v in r.f_locals.items() if v is child), node.attr or "?")
        return Holder("local", name, r.f_code.co_filename, r.f_lineno,
                      f"local {name!r} of {r.f_code.co_name}() (a frame still running)"), None
    if getattr(r, "__dict__", None) is child and node.attr:
        holder = _holder_for_owner(r, node.attr)
        if holder is not None:
            return holder, None
    for registry in ("_buffers", "_parameters", "_modules"):
        if getattr(r, registry, None) is child and node.attr:
            return _holder_for_owner(r, node.attr), None
    if isinstance(r, _CONTAINERS) or type(r).__name__ in ("deque", "cell", "OrderedDict"):
        return None, _Node(r, node.target, node.attr)
    if isinstance(r, (types.FunctionType, types.ModuleType, type)):
        return None, None
    return None, None
