from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, direct_forward_calls
from gradlint.findings import Applicability, Severity
from gradlint.rule import FixPlan, Hit, Invalid, Replace, Rule


class ForwardCalledDirectly(Rule):
    code = "GL205"
    name = "forward-called-directly"
    severity = Severity.ERROR
    summary = "MyFn.forward(...) instead of MyFn.apply(...): the custom backward is bypassed"
    markers = (("autograd", ".forward("),)
    fix_safety = "unsafe"
    doc = """
## What it does
Flags `MyFn.forward(...)` (`MyFn.forward(None, x)`, `MyFn.forward(ctx, x)`) where `MyFn` is an
autograd Function defined in the same file, outside `MyFn`'s own class and its subclasses (which
may compose their base's forward). Calling another Function's forward from inside a Function
bypasses that Function's backward too. Not flagged on a branch of an `if` that tests grad mode
or `requires_grad`: the code chooses its no-grad fast path there, skipping apply's per-call cost.

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
## Fix safety
Unsafe: `MyFn.forward(None, x)` becomes `MyFn.apply(x)`, which attaches the custom backward, so
gradients change (that is the point), and a forward that relied on its first argument being
`None` behaves differently. Offered only when the first argument is positional.
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
        # A no-grad fast path (unsloth's FP8 linear): nothing to differentiate, so no backward is bypassed.
        """
import torch
class QuantLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(weight)
        return x @ weight.t()
    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        return grad @ weight, None
def quant_linear(x, weight):
    if not (torch.is_grad_enabled() and x.requires_grad):
        return QuantLinear.forward(None, x, weight)
    return QuantLinear.apply(x, weight)
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
""", ("return Double.forward(None, x)",), fixed="""
import torch
class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2
def run(x):
    return Double.apply(x)
"""),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for call in direct_forward_calls(model):
            name = call.function
            # Unsafe: apply() returns what forward returns, but now with the custom backward attached,
            # and a forward that relied on its ctx argument (`ctx=None`) behaves differently.
            fix = None if call.apply_instead is None else FixPlan(
                f"Call {name}.apply(...)", Applicability.UNSAFE, (Replace(call.node, call.apply_instead),))
            yield Hit(call.node, f"{name}.forward(...) bypasses the custom backward; call {name}.apply(...)",
                      subject=name, fix=fix)
