from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, saved_output_views
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


def _short(text: str, limit: int = 24) -> str:
    """An expression as one line of a message: its whitespace collapsed, cut at `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SavedOutputView(Rule):
    code = "GL107"
    name = "saved-output-view"
    severity = Severity.ERROR
    summary = "a view of the Function's own output passed to save_for_backward: never freed if backward never runs"
    markers = (("autograd", "save_for_backward"),)
    doc = """
## What it does
Flags `ctx.save_for_backward(...)` in an autograd Function's `forward` or `setup_context` when an
argument is a view of one of the Function's own outputs: a slice (`out[:, :k]`), `out.view(...)`,
`.t()`, `.transpose()`, `.unsqueeze()`, `.expand()`, `.narrow()`, `.select()`. Not reported: the
whole output, a copy (`out[1:].clone()`, advanced indexing), a detached view
(`out.detach()[1:]`), an output marked non-differentiable or an integer one, and calls that may
copy instead of viewing (`.contiguous()`, `.reshape()`, `.flatten()`, `.to()`).

## Why is this bad?
Measured on torch 2.13 (pytorch/pytorch#94990): the saved view keeps its base, the output, and
the saved slot points back to the node that made it. When backward never runs on that graph
(evaluation under grad mode, a loss that is skipped, an exception between forward and backward),
the cycle goes through autograd's C++ objects that Python's collector cannot see: 50 of 50 outputs
were still alive after `gc.collect()`, the whole output each time (131072 B per call for a
256x128 float32 output saved as `out[:, :8]`). When backward runs, the slots are released and
nothing leaks (0 of 50), which is why the bug hides in training and shows in evaluation. Saving
the whole output (`save_for_backward(out)`), a clone, or `out.detach()[...]` leaks nothing.

## Example
```python
class TopHalf(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.save_for_backward(out[:, : out.size(1) // 2])
        return out
```

## Use instead
```python
class TopHalf(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.save_for_backward(out)  # slice it in backward
        return out
```
"""
    VALID = (
        # The whole output, a clone of a slice, a detached slice, a view of an input, a reshape
        # (it may copy), and an integer output.
        """
import torch
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, idx):
        out = x.exp()
        order = x.argsort(dim=1)
        ctx.save_for_backward(out, out[1:].clone(), out.detach()[1:], x[1:], out.reshape(-1), order[:, :2])
        return out, order
""",
        """
import torch
class Pick(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x * 2
        ctx.mark_non_differentiable(out)
        ctx.save_for_backward(out[:, :1])
        return out
""",
    )
    INVALID = (
        Invalid("""
import torch
class TopHalf(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.save_for_backward(x, out[:, : out.size(1) // 2])
        return out
class Gate(torch.autograd.Function):
    @staticmethod
    def forward(x, w):
        return torch.sigmoid(x @ w)
    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w = inputs
        ctx.save_for_backward(x, w, output.t())
""", ("ctx.save_for_backward(x, out[:, : out.size(1) // 2])", "ctx.save_for_backward(x, w, output.t())")),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for view in saved_output_views(model):
            yield Hit(view.node, (
                f"`{_short(view.argument)}` views the output: leaked if backward never runs; "
                "save the whole output, slice it in backward"), subject=f"{view.function}.saved_tensors")
