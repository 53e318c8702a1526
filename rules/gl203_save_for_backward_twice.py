from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, repeated_saves
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


class SaveForBackwardTwice(Rule):
    code = "GL203"
    name = "save-for-backward-twice"
    severity = Severity.ERROR
    summary = "save_for_backward called twice on one path: only the last call's tensors survive"
    markers = ("save_for_backward",)
    doc = """
## What it does
Flags a second `ctx.save_for_backward(...)` call that can run after a first one in the same
`forward` or `setup_context`. Calls in the two branches of one `if` are alternatives, not repeats,
and so is a call in a branch that returns (or raises) and one after the `if`.

## Why is this bad?
Measured on torch 2.13: each call replaces what the previous one saved. `saved_tensors` then holds
only the last call's tensors, silently: backward unpacks the wrong tensors or fails to unpack.

## Example
```python
ctx.save_for_backward(x)
ctx.save_for_backward(index)
```

## Use instead
```python
ctx.save_for_backward(x, index)
```
"""
    VALID = (
        """
import torch
class Pick(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index, exact):
        if exact:
            ctx.save_for_backward(x, index)
        else:
            ctx.save_for_backward(index)
        return x[index]
""",
        # An early return (liger's DTensor path): its save is the only one on that path.
        """
import torch
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, local):
        if local:
            ctx.save_for_backward(x.to_local(), w)
            return x.to_local() * w
        ctx.save_for_backward(x, w)
        return x * w
""",
    )
    INVALID = (
        Invalid("""
import torch
class Pick(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index, weight):
        ctx.save_for_backward(x)
        out = x[index]
        if weight is not None:
            ctx.save_for_backward(index, weight)
        ctx.save_for_backward(index)
        return out
""", ("ctx.save_for_backward(index, weight)", "ctx.save_for_backward(index)")),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for save in repeated_saves(model):
            yield Hit(save.node, (
                "a second save_for_backward replaces the first: saved_tensors holds only the last call's "
                "tensors; save all in one call"), subject=save.function)
