"""The methods of an autograd Function class that torch calls as static ones but are not declared so.

One question, `methods_missing_staticmethod(model)`: each `forward`, `backward`, `setup_context`,
`jvp` or `vmap` defined in a Function class without `@staticmethod` (or `@classmethod`), with
where `@staticmethod` would go and whether adding it is safe.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradlint.file_model import FileModel
from gradlint.names import dotted

_STATIC_METHODS = ("forward", "backward", "setup_context", "jvp", "vmap")


@dataclass(frozen=True)
class NonStaticMethod:
    """A Function method torch calls without an instance, defined without @staticmethod."""

    node: cst.Name  # the method's name in its def
    method: str  # forward, backward, setup_context, jvp or vmap
    function: str  # the Function's name
    # The line @staticmethod goes above: the first decorator (outermost, so that
    # @once_differentiable and the like still wrap the plain function) or the def.
    insert_above: cst.CSTNode
    # The class defines no __init__, so it keeps no state of its own and its methods only ever see
    # ctx: adding @staticmethod changes nothing else.
    safe_to_add: bool


def methods_missing_staticmethod(model: FileModel) -> list[NonStaticMethod]:
    """In class order, then in the order the class defines them."""
    found = []
    for function in model.function_classes:
        if not isinstance(function.node, cst.ClassDef):
            continue
        statements = function.node.body.body
        stateless = not any(isinstance(s, cst.FunctionDef) and s.name.value == "__init__" for s in statements)
        for statement in statements:
            if isinstance(statement, cst.FunctionDef) and statement.name.value in _STATIC_METHODS \
                    and not any(dotted(d.decorator) in ("staticmethod", "classmethod") for d in statement.decorators):
                above = statement.decorators[0] if statement.decorators else statement
                found.append(NonStaticMethod(statement.name, statement.name.value, function.name, above, stateless))
    return found
