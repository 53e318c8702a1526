"""Cheap questions about CPython's `ast` tree, asked before paying for libcst.

Parsing with libcst costs about 10x CPython's parser; most files that mention `nn.Module` or
`autograd` hold no class or function a rule could report on. These answers are deliberately
loose (a yes only means "look closer"), never stricter than the rules.
"""

from __future__ import annotations

import ast
from typing import Iterator

from gradlint.torch_api import CONTAINER_STORING_METHODS


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
