from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, function_instantiations, methods_missing_staticmethod
from gradlint.findings import Applicability, Severity
from gradlint.rule import FixPlan, Hit, InsertLineAbove, Invalid, Replace, Rule

_LEGACY_ERROR = ("RuntimeError: Legacy autograd function with non-static forward method is deprecated. "
                 "Please use new-style autograd function with static forward method.")


class NonStaticFunctionMethod(Rule):
    code = "GL202"
    name = "non-static-function-method"
    severity = Severity.ERROR
    summary = "an autograd Function method without @staticmethod, or a Function instantiated"
    markers = (("autograd", "def forward"),)
    fix_safety = "safe or unsafe"
    doc = f"""
## What it does
Flags `forward`, `backward`, `setup_context`, `jvp` or `vmap` of an autograd Function defined
without `@staticmethod`, and any instantiation of an autograd Function class (`MyFn()(x)`).
An instantiation is an error; a method without `@staticmethod` is a warning, since it still works
through `MyFn.apply(...)`.

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
## Fix safety
Adding `@staticmethod` is safe (above the other decorators, so `@once_differentiable` still
wraps the function), and offered only when the class has no `__init__`: its methods then never
see anything but ctx. Rewriting `MyFn()(x)` as `MyFn.apply(x)` is unsafe: a legacy Function
that kept state on its instance behaves differently.
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
""", ("def forward(ctx, x):", "y = Scale()(x)"), fixed="""
import torch
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2
y = Scale.apply(x)
"""),
        Invalid("""
import torch
from torch.autograd.function import once_differentiable
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(0, 1)
    @once_differentiable
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * ((x > 0) & (x < 1))
""", ("def backward(ctx, g):",), fixed="""
import torch
from torch.autograd.function import once_differentiable
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(0, 1)
    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * ((x > 0) & (x < 1))
"""),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for method in methods_missing_staticmethod(model):
            fix = FixPlan("Add @staticmethod", Applicability.SAFE,
                          (InsertLineAbove(method.insert_above, "@staticmethod"),))
            yield Hit(method.node, (
                f"{method.method} has no @staticmethod: it works only through apply() "
                "and an instance raises; add @staticmethod"), Severity.WARNING, method.function,
                fix if method.safe_to_add else None)
        for instance in function_instantiations(model):
            name = instance.function
            fix = FixPlan(f"Call {name}.apply(...)", Applicability.UNSAFE,
                          (Replace(instance.node, f"{name}.apply"),))
            yield Hit(instance.node, (
                f"{name}() instantiates an autograd Function, and calling the instance raises; "
                f"call {name}.apply(...)"), subject=name, fix=fix if instance.called else None)
