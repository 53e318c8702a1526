from __future__ import annotations

from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint.file_model import FileModel
from gradlint.findings import Severity
from gradlint.names import dotted
from gradlint.rule import Hit, Invalid, Rule

_STATIC_METHODS = ("forward", "backward", "setup_context", "jvp", "vmap")
_LEGACY_ERROR = ("RuntimeError: Legacy autograd function with non-static forward method is deprecated. "
                 "Please use new-style autograd function with static forward method.")


class NonStaticFunctionMethod(Rule):
    code = "GL202"
    name = "non-static-function-method"
    severity = Severity.ERROR
    summary = "an autograd Function method without @staticmethod, or a Function instantiated"
    markers = (("autograd", "def forward"),)
    doc = f"""
## What it does
Flags `forward`, `backward`, `setup_context`, `jvp` or `vmap` of an autograd Function defined
without `@staticmethod`, and any instantiation of an autograd Function class (`MyFn()(x)`).

## Why is this bad?
Measured on torch 2.13: calling an instance (`MyFn()(x)`) warns that Functions should not be
instantiated, then raises `{_LEGACY_ERROR}`, for static and non-static classes alike. A method
without `@staticmethod` still works through `MyFn.apply(x)` (its first parameter receives ctx),
which hides the mistake until someone calls the instance or torch drops the legacy path.

## Example
```python
class Scale(torch.autograd.Function):
    def forward(ctx, x):
        return x * 2

y = Scale()(x)
```

## Use instead
```python
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

y = Scale.apply(x)
```
"""
    VALID = (
        """
import torch
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2
    def helper(self):
        return 1
y = Scale.apply(x)
""",
    )
    INVALID = (
        Invalid("""
import torch
class Scale(torch.autograd.Function):
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2
y = Scale()(x)
""", ("def forward(ctx, x):", "y = Scale()(x)")),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for function in model.function_classes:
            if not isinstance(function.node, cst.ClassDef):
                continue
            for statement in function.node.body.body:
                if isinstance(statement, cst.FunctionDef) and statement.name.value in _STATIC_METHODS \
                        and not any(dotted(d.decorator) in ("staticmethod", "classmethod") for d in statement.decorators):
                    yield Hit(statement.name, (
                        f"{function.name}.{statement.name.value} has no @staticmethod: it works through "
                        f"{function.name}.apply() only because its first parameter receives ctx, and calling an "
                        f"instance raises `{_LEGACY_ERROR}`; add @staticmethod"), Severity.WARNING, function.name)
        for site in model.call_sites:
            name = dotted(site.call.func)
            if name in model.function_class_names and not site.call.args:
                yield Hit(site.call, (
                    f"{name}() instantiates an autograd Function: torch warns that it should not be instantiated, "
                    f"and calling the instance raises `{_LEGACY_ERROR}`; call {name}.apply(...)"), subject=name)
