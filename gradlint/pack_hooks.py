"""The pack hooks given to `torch.autograd.graph.saved_tensors_hooks`, and what they return.

One question, `pack_hooks(model)`: each pack hook a call of `saved_tensors_hooks(pack, unpack)`
(any import form), of its `__init__`, or of `super().__init__(pack, unpack)` in a subclass names,
resolved to its def (a def in the enclosing function or the file, a method, a lambda), with the
returns that give back the tensor the hook received.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from gradlint import torch_api as api
from gradlint.call_sites import CallSite, keyword
from gradlint.file_model import FileModel
from gradlint.names import dotted
from gradlint.prescan import blocks_of, child_nodes, target_names


@dataclass(frozen=True)
class PackHook:
    """One pack hook as a saved_tensors_hooks call passes it."""

    name: str  # as a user names it: `pack`, `Offload.pack`; "" for a lambda given in place
    # The returns (the lambda's body, for a lambda) that give back the tensor the hook received,
    # alone or in a tuple or list, outside a branch for tensors that are no op's output.
    returns_its_argument: tuple[cst.CSTNode, ...]


def pack_hooks(model: FileModel) -> list[PackHook]:
    """Every pack hook of the file's saved_tensors_hooks calls, in call order."""
    found = []
    for site in model.call_sites:
        pack = _pack_argument(model, site)
        if pack is None:
            continue
        hook, name, is_method = _resolve(model, site, pack)
        returns: list[cst.CSTNode] = []
        if isinstance(hook, cst.Lambda):
            params = hook.params.params
            if params and _gives_argument(hook.body, {params[0].name.value}):
                returns.append(hook.body)
        elif hook is not None:
            argument = _first_argument(hook, is_method)
            if argument is not None:
                scan = _PackScan()
                scan.block(hook.body.body, {argument}, False)
                returns.extend(scan.returns)
        found.append(PackHook(name, tuple(returns)))
    return found


# A test on these marks a branch for tensors that are not an op's output (parameters, leaves,
# tensors that do not require grad): returning those as they are forms no cycle (measured).
_GUARD_ATTRIBUTES = frozenset({"is_leaf", "grad_fn", "requires_grad"})
_GUARD_NAMES = frozenset({"Parameter", "Buffer"})


def _is_guard(test: cst.CSTNode) -> bool:
    if isinstance(test, cst.Attribute) and (test.attr.value in _GUARD_ATTRIBUTES or test.attr.value in _GUARD_NAMES):
        return True
    if isinstance(test, cst.Name) and test.value in _GUARD_NAMES:
        return True
    return any(_is_guard(child) for child in child_nodes(test))


def _gives_argument(expr: cst.BaseExpression, live: set[str]) -> bool:
    """The value is the argument itself, or a tuple/list literal holding it (measured: `(t, obj)`
    leaks as `t` does)."""
    if isinstance(expr, cst.Name):
        return expr.value in live
    if isinstance(expr, (cst.Tuple, cst.List)):
        return any(isinstance(e.value, cst.Name) and e.value.value in live for e in expr.elements)
    if isinstance(expr, cst.IfExp) and not _is_guard(expr.test):
        return _gives_argument(expr.body, live) or _gives_argument(expr.orelse, live)
    return False


class _PackScan:
    """A pack function's statements in order: which names still hold its argument, and the
    returns that give it back. A name rebound on some path (`t = t.cpu()`) no longer counts."""

    def __init__(self) -> None:
        self.returns: list[cst.Return] = []

    def block(self, statements, live: set[str], guarded: bool) -> set[str]:
        for statement in statements:
            live = self.statement(statement, live, guarded)
        return live

    def statement(self, node: cst.CSTNode, live: set[str], guarded: bool) -> set[str]:
        if isinstance(node, cst.SimpleStatementLine):
            live = set(live)
            for small in node.body:
                self.small(small, live, guarded)
            return live
        if isinstance(node, cst.If):
            inner = guarded or _is_guard(node.test)
            body = self.block(node.body.body, set(live), inner)
            if isinstance(node.orelse, cst.If):
                orelse = self.statement(node.orelse, set(live), inner)
            elif node.orelse is not None:
                orelse = self.block(node.orelse.body.body, set(live), inner)
            else:
                orelse = live
            return body & orelse
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return live - {node.name.value}
        entry = set(live)
        if isinstance(node, cst.For):
            entry -= set(target_names(node.target))
        if isinstance(node, cst.With):
            for item in node.items:
                if item.asname is not None:
                    entry -= set(target_names(item.asname.name))
        ends = [entry]
        for inner_block in blocks_of(node):
            ends.append(self.block(inner_block, set(entry), guarded))
        return set.intersection(*ends)

    def small(self, node: cst.BaseSmallStatement, live: set[str], guarded: bool) -> None:
        if isinstance(node, cst.Return):
            if node.value is not None and not guarded and _gives_argument(node.value, live):
                self.returns.append(node)
        elif isinstance(node, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            alias = node.value is not None and isinstance(node.value, cst.Name) and node.value.value in live
            for target in targets:
                names = set(target_names(target))
                live -= names
                if alias and isinstance(target, cst.Name):
                    live |= names
        elif isinstance(node, (cst.AugAssign, cst.Del)):
            live -= set(target_names(node.target))


def _first_argument(function: cst.FunctionDef, method: bool) -> str | None:
    params = list(function.params.posonly_params) + list(function.params.params)
    is_static = any(dotted(d.decorator) == "staticmethod" for d in function.decorators)
    if method and not is_static:
        params = params[1:]
    return params[0].name.value if params else None


def _defined_in(statements, name: str) -> cst.FunctionDef | cst.Lambda | None:
    """`def name` or `name = lambda ...` among these statements (not inside nested functions)."""
    found = None
    for statement in statements:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
            found = statement
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and isinstance(small.value, cst.Lambda) and any(
                        isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets):
                    found = small.value
        elif not isinstance(statement, cst.ClassDef):
            for block in blocks_of(statement):
                found = _defined_in(block, name) or found
    return found


def _method(model: FileModel, class_name: str, name: str) -> cst.FunctionDef | None:
    """A method of a class in this file or of one of its same-file bases."""
    classes = {node.name.value: node for node in _classes_in(model.module.body)}
    for owner in [class_name] + sorted(model.ancestors(class_name) - {class_name}):
        node = classes.get(owner)
        if node is None:
            continue
        for statement in node.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
                return statement
    return None


def _classes_in(statements) -> Iterator[cst.ClassDef]:
    for statement in statements:
        if isinstance(statement, cst.ClassDef):
            yield statement
            yield from _classes_in(statement.body.body)
        elif not isinstance(statement, cst.FunctionDef):
            for block in blocks_of(statement):
                yield from _classes_in(block)


def _pack_argument(model: FileModel, site: CallSite) -> cst.BaseExpression | None:
    """The pack hook given to saved_tensors_hooks(...), or to its __init__ from a subclass."""
    call = site.call
    func = call.func
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    named = keyword(call, "pack_hook")
    if _qualified(model, func) in api.SAVED_TENSORS_HOOKS:
        return named or (positional[0] if positional else None)
    if not isinstance(func, cst.Attribute) or func.attr.value != "__init__":
        return None
    if _qualified(model, func.value) in api.SAVED_TENSORS_HOOKS:  # saved_tensors_hooks.__init__(self, pack, unpack)
        return named or (positional[1] if len(positional) > 1 else None)
    is_super = isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Name) \
        and func.value.func.value == "super"
    if is_super and site.owner_class is not None and any(
            _qualified(model, base.value) in api.SAVED_TENSORS_HOOKS for base in site.owner_class.bases):
        return named or (positional[0] if positional else None)
    return None


def _resolve(model: FileModel, site: CallSite, pack: cst.BaseExpression) \
        -> tuple[cst.FunctionDef | cst.Lambda | None, str, bool]:
    """The def or lambda a pack argument names, its name for messages ("" for a lambda given
    in place), and whether it is a method."""
    if isinstance(pack, cst.Lambda):
        return pack, "", False
    if isinstance(pack, cst.Name):
        found = _defined_in(site.function.body.body, pack.value) if site.function is not None else None
        found = found or model.functions.get(pack.value) or _defined_in(model.module.body, pack.value)
        return found, pack.value, False
    if isinstance(pack, cst.Attribute) and isinstance(pack.value, cst.Name):
        owner, name = pack.value.value, pack.attr.value
        if site.owner_class is not None and site.function is not None and site.function.params.params \
                and site.function.params.params[0].name.value == owner:  # self.pack
            class_name = site.owner_class.name.value
            return _method(model, class_name, name), f"{class_name}.{name}", True
        if owner in {c.name.value for c in _classes_in(model.module.body)}:  # Hooks.pack
            return _method(model, owner, name), f"{owner}.{name}", True
    return None, "", False


def _qualified(model: FileModel, expr: cst.BaseExpression) -> str | None:
    return model.imports.qualify(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
