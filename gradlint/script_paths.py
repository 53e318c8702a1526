"""The directories a script puts on `sys.path` itself, where its imports are then found.

Research code run as scripts reaches its sibling packages this way: DGL's hilander/PSS does
`sys.path.append("..")` before `from models import LANDER`, others
`sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))` or
`ROOT = Path(__file__).resolve().parents[1]; sys.path.append(str(ROOT))`. Without these the
imports are unknown and the analysis stays quiet about what they give.

Read from CPython's tree of the checked file: the statements of its top level (and the if, try
and with blocks there) in order, with the names bound to paths before them. A path is worked out
only from what the file fixes: a literal, `__file__`, os.path's dirname, abspath, realpath,
normpath and join (of literal parts), pathlib's Path with `/`, `.parent`, `.parents[n]` and
`.resolve()`, `str()`. Anything else (an environment variable, an argument) is unknown and adds
nothing. A relative path is relative to the working directory when the import runs; taken here as
the script's own directory, where such scripts are run from (PSS's README: `cd ../PSS`). The
project looks in these directories last, after the file's roots and its own directory (Python
looks in an inserted one first: a module found both ways is rare, and the nearer one wins here).
A directory that holds no such module only adds places looked at in vain.
"""

from __future__ import annotations

import ast
import os

from gradlint.prechecks import dotted as _dotted

_PATH_FUNCTIONS = {"dirname": os.path.dirname, "abspath": os.path.abspath, "realpath": os.path.abspath,
                   "normpath": os.path.normpath}
_SAME = frozenset({"str", "os.fspath", "fspath", "Path", "pathlib.Path", "PurePath", "pathlib.PurePath"})
_ADDING = frozenset({"append", "insert"})


def added_directories(tree: ast.Module, path: str) -> tuple[str, ...]:
    """The directories the script at `path` adds to sys.path, in the order it adds them."""
    script = os.path.abspath(path)
    here = os.path.dirname(script)
    bound: dict[str, str] = {}
    found: list[str] = []
    for statement in _top_level(tree.body):
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name):
            value = _path(statement.value, bound, script, here)
            name = statement.targets[0].id
            if value is None:
                bound.pop(name, None)
            else:
                bound[name] = value
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            call = statement.value
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr in _ADDING and _dotted(func.value) == "sys.path" \
                    and len(call.args) == (2 if func.attr == "insert" else 1):
                directory = _path(call.args[-1], bound, script, here)
                if directory is not None and directory not in found:
                    found.append(directory)
    return tuple(found)


def _top_level(body: list[ast.stmt]):
    for statement in body:
        yield statement
        if isinstance(statement, (ast.If, ast.With)):
            yield from _top_level(statement.body)
            yield from _top_level(getattr(statement, "orelse", []))
        elif isinstance(statement, ast.Try):
            for block in (statement.body, *(h.body for h in statement.handlers), statement.orelse,
                          statement.finalbody):
                yield from _top_level(block)


def _path(node: ast.expr, bound: dict[str, str], script: str, here: str) -> str | None:
    """The absolute path `node` gives, or None when it is not decided on the spot."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return os.path.normpath(os.path.join(here, node.value))
    if isinstance(node, ast.Name):
        return script if node.id == "__file__" else bound.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # Path(...) / "models"
        left, right = _path(node.left, bound, script, here), _part(node.right)
        return os.path.normpath(os.path.join(left, right)) if left is not None and right is not None else None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _path(node.value, bound, script, here)
        return os.path.dirname(inner) if inner is not None else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents" \
            and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int and node.slice.value >= 0:
        inner = _path(node.value.value, bound, script, here)
        if inner is None:
            return None
        for _ in range(node.slice.value + 1):
            inner = os.path.dirname(inner)
        return inner
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in ("resolve", "absolute") and not node.args:
        return _path(func.value, bound, script, here)
    name = _dotted(func) or ""
    last = name.rsplit(".", 1)[-1]
    if name in _SAME and len(node.args) == 1:
        return _path(node.args[0], bound, script, here)
    if name in ("os.getcwd", "getcwd") and not node.args:
        return here
    if last in _PATH_FUNCTIONS and name in (last, f"path.{last}", f"os.path.{last}", f"osp.{last}") \
            and len(node.args) == 1:
        inner = _path(node.args[0], bound, script, here)
        return _PATH_FUNCTIONS[last](inner) if inner is not None else None
    if last == "join" and name in ("join", "path.join", "os.path.join", "osp.join") and node.args:
        first = _path(node.args[0], bound, script, here)
        rest = [_part(arg) for arg in node.args[1:]]
        if first is None or any(part is None for part in rest):
            return None
        return os.path.normpath(os.path.join(first, *rest))
    return None


def _part(node: ast.expr) -> str | None:
    """A literal part joined onto a path."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

