from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.file_model import FileModel
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


class ForwardCalledDirectly(Rule):
    code = "GL205"
    name = "forward-called-directly"
    severity = Severity.ERROR
    summary = "MyFn.forward(...) instead of MyFn.apply(...): the custom backward is bypassed"
    markers = (("autograd", ".forward("),)
    doc = """
## What it does
Flags `MyFn.forward(...)` (`MyFn.forward(None, x)`, `MyFn.forward(ctx, x)`) where `MyFn` is an
autograd Function defined in the same file, outside `MyFn`'s own class and its subclasses (which
may compose their base's forward). Calling another Function's forward from inside a Function
bypasses that Function's backward too.

## Why is this bad?
Measured on torch 2.13: `F.forward(None, x)` raises nothing and returns a tensor whose `grad_fn`
is whatever the last op inside forward was (`MulBackward0`): the custom backward never runs,
ctx bookkeeping is skipped, and the gradients are those of the ops inside forward, or none at all
when forward works on detached data or in a custom kernel.

## Example
```python
y = ScatterSum.forward(None, src, index, dim_size)
```

## Use instead
```python
y = ScatterSum.apply(src, index, dim_size)
```
"""
    VALID = (
        """
import torch
class Base(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
class Child(Base):
    @staticmethod
    def forward(ctx, x):
        return Base.forward(ctx, x) + 1
y = Child.apply(x)
z = model.forward(x)
""",
    )
    INVALID = (
        Invalid("""
import torch
class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2
def run(x):
    return Double.forward(None, x)
""", ("return Double.forward(None, x)",)),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for site in model.call_sites:
            name = model.function_class_call(site.call, "forward")
            if name is None:
                continue
            if site.owner_class is not None and name in model.ancestors(site.owner_class.name.value):
                continue  # inside the Function itself or a subclass: composing its own forward

            yield Hit(site.call, (
                f"{name}.forward(...) runs forward outside autograd: the custom backward is bypassed and the "
                f"result's grad_fn is the last op inside forward, if any (measured, torch 2.13); "
                f"call {name}.apply(...)"), subject=name)
