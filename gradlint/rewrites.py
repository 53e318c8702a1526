"""Small pieces rules build their fixes from: source text of nodes, and where a statement sits."""

from __future__ import annotations

import re

import libcst as cst

from gradlint.names import code
# Values a running total or a log keeps: a loss, a metric. `.item()` makes them Python floats.
_SCALAR_NAME = re.compile(r"loss|total|running|sum|acc|metric|err", re.IGNORECASE)


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


def kept_value(node: cst.BaseExpression, holder: str, scope: cst.CSTNode | None = None) -> tuple[str, str]:
    """What to keep instead of a graph-attached value, and the method used: `.item()` for what reads
    as a scalar (a loss, a total), `.detach()` otherwise (an output, a hidden state), and also when
    `scope` uses the holder as a tensor (`total.item()` later would fail on a float)."""
    scalar = _SCALAR_NAME.search(code(node)) or _SCALAR_NAME.search(holder)
    method = "item" if scalar and not (scope is not None and used_as_tensor(scope, holder)) else "detach"
    return method_call(node, method), method


# What a Python float has too: using these on a total does not show it must stay a tensor.
_FLOAT_ATTRIBUTES = frozenset({"real", "imag", "conjugate", "hex", "is_integer", "as_integer_ratio"})


def used_as_tensor(scope: cst.CSTNode, holder: str) -> bool:
    """Whether `holder.<attribute>` appears in scope with an attribute a float does not have."""
    found = False

    class Uses(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            nonlocal found
            if node.attr.value not in _FLOAT_ATTRIBUTES and code(node.value).strip() == holder:
                found = True
            return not found

    scope.visit(Uses())
    return found


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
