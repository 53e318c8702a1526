"""Small pieces rules build their fixes from: source text of nodes, and where a statement sits."""

from __future__ import annotations

import libcst as cst

from gradlint.names import code
from gradlint.values import Val


def _atomic(node: cst.BaseExpression) -> bool:
    """Whether `node.method()` binds to the whole of node without parentheses."""
    if node.lpar:
        return True
    return isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript))


def method_call(node: cst.BaseExpression, method: str) -> str:
    text = code(node).strip()
    return f"{text}.{method}()" if _atomic(node) else f"({text}).{method}()"


_DISPLAYS = (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def is_display(node: cst.BaseExpression) -> bool:
    """A list, tuple, set or dict written out: `.detach()`/`.item()` on it would raise, and which
    of its elements to detach is for a person to decide."""
    return isinstance(node, _DISPLAYS)


def kept_value(node: cst.BaseExpression, value: Val, floats_do: bool) -> tuple[str, str] | None:
    """What to keep instead of a graph-attached value, and the method used, or None when neither
    is sure to be right code: `.item()` for a tensor proven to hold one element (a full reduction,
    a torch loss, what backward() ran on) when every later use takes a Python number, `.detach()`
    for another tensor the analysis proves is one (not a module's output, which is as often a
    tuple, a dict or a ModelOutput, nor something read out of one, nor a tensor-or-None)."""
    if is_display(node) or not value.proven_tensor or value.param:
        return None
    method = "item" if value.one_element and floats_do else "detach"
    return method_call(node, method), method


def statement_in_body(body: cst.BaseSuite, small: cst.BaseSmallStatement) -> cst.SimpleStatementLine | None:
    """The line holding `small` when it is alone on a line directly in `body` (not nested in an
    if/for/with): the only place a statement can be moved or removed without reading control flow."""
    if not isinstance(body, cst.IndentedBlock):
        return None
    for statement in body.body:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and statement.body[0] is small:
            return statement
    return None


def first_statement(function: cst.FunctionDef) -> cst.BaseStatement | None:
    """The first statement after the docstring: where code that must run first goes."""
    if not isinstance(function.body, cst.IndentedBlock):
        return None
    body = list(function.body.body)
    if body and function.get_docstring(clean=False) is not None:
        body = body[1:]
    return body[0] if body else None
