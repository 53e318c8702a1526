from __future__ import annotations

from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint.file_model import FileModel, blocks_of, leading_params
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


def _saves(statement: cst.CSTNode, ctx: str) -> list[cst.Call]:
    """The ctx.save_for_backward(...) calls a simple statement line makes."""
    calls = []
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            value = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                    and value.func.attr.value == "save_for_backward" \
                    and isinstance(value.func.value, cst.Name) and value.func.value.value == ctx:
                calls.append(value)
    return calls


def repeated_saves(block, ctx: str, saved_before: bool) -> tuple[list[cst.Call], bool]:
    """Calls made when an earlier save_for_backward may already have run on the same path, and
    whether this block may save. Branches of one `if` are alternatives: each starts from what
    came before the `if`, not from the other branch."""
    repeats: list[cst.Call] = []
    saved = saved_before
    for statement in block:
        calls = _saves(statement, ctx)
        if calls:
            repeats.extend(calls if saved else calls[1:])
            saved = True
            continue
        if isinstance(statement, cst.If):
            branch_saved = False
            for branch in blocks_of(statement):
                inner, did = repeated_saves(branch, ctx, saved)
                repeats.extend(inner)
                branch_saved = branch_saved or did
            saved = saved or branch_saved
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            for inner_block in blocks_of(statement):
                inner, did = repeated_saves(inner_block, ctx, saved)
                repeats.extend(inner)
                saved = saved or did
    return repeats, saved


class SaveForBackwardTwice(Rule):
    code = "GL203"
    name = "save-for-backward-twice"
    severity = Severity.ERROR
    summary = "save_for_backward called twice on one path: only the last call's tensors survive"
    markers = ("save_for_backward",)
    doc = """
## What it does
Flags a second `ctx.save_for_backward(...)` call that can run after a first one in the same
`forward` or `setup_context`. Calls in the two branches of one `if` are alternatives, not repeats.

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
        for function in model.function_classes:
            for method in (function.forward if function.style == "ctx" else None, function.setup_context):
                skip = leading_params(method) if method is not None else 0
                if method is None or len(method.params.params) <= skip:
                    continue
                ctx = method.params.params[skip].name.value
                repeats, _ = repeated_saves(method.body.body, ctx, False)
                for call in repeats:
                    yield Hit(call, (
                        "a second save_for_backward replaces the first: saved_tensors holds only the last call's "
                        "tensors; save all in one call"), subject=function.name)
