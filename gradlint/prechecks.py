"""Cheap questions about CPython's `ast` tree, asked before paying for libcst.

Parsing with libcst costs about 10x CPython's parser; most files that mention `nn.Module` or
`autograd` hold no class or function a rule could report on. These answers are deliberately
loose (a yes only means "look closer"), never stricter than the rules.
"""

from __future__ import annotations

import ast
from typing import Iterator

from gradlint.torch_api import CONTAINER_STORING_METHODS, STEP_METHODS, TRAINING_ITERABLE



def _classes(tree: ast.Module) -> Iterator[ast.ClassDef]:
    stack: list = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.ClassDef):
            yield node
            stack.extend(node.body)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            stack.extend(ast.iter_child_nodes(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(node.body)


def _base_text(base: ast.expr) -> str:
    return ast.unparse(base) if not isinstance(base, ast.Name) else base.id


def has_autograd_function(tree: ast.Module) -> bool:
    """A class with a base named like a Function (or any base, with forward and backward), or a
    register_autograd call."""
    aliases = {"Function"} | {
        alias.asname for node in _top_level(tree) if isinstance(node, ast.ImportFrom)
        for alias in node.names if alias.asname and "Function" in alias.name}
    for cls in _classes(tree):
        bases = [_base_text(b) for b in cls.bases]
        methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if any(alias in base for base in bases for alias in aliases) or ({"forward", "backward"} <= methods and bases):
            return True
    return _mentions_register_autograd(tree)


def _mentions_register_autograd(tree: ast.Module) -> bool:
    for node in _top_level(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "register_autograd":
                return True
    return False


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """Module-level statements, looking inside if/try blocks (import guards)."""
    stack: list = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.If, ast.Try)):
            stack.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt))
        else:
            yield node


def stores_on_self_in(tree: ast.Module, method: str) -> bool:
    """A class whose `method` assigns to its first parameter's attributes, calls a container
    method on one, or declares a global."""
    for cls in _classes(tree):
        if not cls.bases:
            continue
        for function in cls.body:
            if isinstance(function, ast.FunctionDef) and function.name == method and function.args.args:
                owner = function.args.args[0].arg
                for node in ast.walk(function):
                    if isinstance(node, ast.Global):
                        return True
                    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        if any(_rooted_at(t, owner) for t in targets):
                            return True
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                            and node.func.attr in CONTAINER_STORING_METHODS and _rooted_at(node.func.value, owner):
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


# ----- stores that can outlive a training step (GL103, GL104) -------------------------------
# The flow walk reports a store only when its target outlives the step: an attribute, a parameter,
# a global or closure variable, or a local built across a training or evaluation loop. Most of
# torch's own files with `.backward(` and `.append(` keep lists local to one test: no libcst.

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def may_store_across_steps(tree: ast.Module) -> bool:
    scopes: list[ast.AST] = [tree]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scopes.append(node)
    return any(_scope_may_store(scope) for scope in scopes)


class _NotLocal(Exception):
    """A store into something other than a plain name: the answer is yes, stop looking."""


def _scope_may_store(scope: ast.AST) -> bool:
    params: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        arguments = scope.args
        params = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
        params |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    local: set[str] = set()
    stores: list[tuple[str, tuple[ast.stmt, ...]]] = []
    declared: set[str] = set()

    def store(target: ast.expr, loops: tuple[ast.stmt, ...]) -> None:
        if not isinstance(target, ast.Name):
            raise _NotLocal  # an attribute, an item of something, setattr
        stores.append((target.id, loops))

    def visit(node: ast.AST, loops: tuple[ast.stmt, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _SCOPES):
                if not isinstance(child, ast.Lambda):
                    local.add(child.name)
                continue  # its own scope (a class body's stores are attributes of the class)
            if isinstance(child, (ast.Global, ast.Nonlocal)):
                declared.update(child.names)
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                local.add(child.id)
            elif isinstance(child, ast.Call):
                func = child.func
                if isinstance(func, ast.Attribute) and func.attr in CONTAINER_STORING_METHODS:
                    store(func.value, loops)
                elif isinstance(func, ast.Name) and func.id == "setattr":
                    raise _NotLocal
            elif isinstance(child, ast.AugAssign):
                store(child.target, loops)
            elif isinstance(child, ast.Assign):
                for target in child.targets:
                    if isinstance(target, ast.Subscript):
                        store(target.value, loops)
                    elif isinstance(target, (ast.Name, ast.Attribute)) and _mentions(child.value, target):
                        store(target, loops)
            visit(child, (*loops, child) if isinstance(child, (ast.For, ast.AsyncFor, ast.While)) else loops)

    try:
        visit(scope, ())
    except _NotLocal:
        return True
    step_loops: dict[int, bool] = {}
    for name, loops in stores:
        if name in declared or name in params or name not in local:
            return True
        for loop in loops:
            if id(loop) not in step_loops:
                step_loops[id(loop)] = _is_step_loop(loop)
            if step_loops[id(loop)]:
                return True
    return False


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _mentions(value: ast.expr, target: ast.expr) -> bool:
    """Whether `value` reads `target` (`total = total + loss`, `self.t = self.t + loss`)."""
    wanted = _dotted(target)
    if wanted is None:
        return False
    if isinstance(target, ast.Name):
        return any(isinstance(n, ast.Name) and n.id == wanted for n in ast.walk(value))
    return any(isinstance(n, ast.Attribute) and n.attr == target.attr and _dotted(n) == wanted
               for n in ast.walk(value))


def _is_step_loop(loop: ast.stmt) -> bool:
    header = loop.iter if isinstance(loop, (ast.For, ast.AsyncFor)) else loop.test
    if TRAINING_ITERABLE.search(ast.unparse(header)):
        return True
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in STEP_METHODS
               for n in ast.walk(loop))
