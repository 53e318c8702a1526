from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, containers_passed_to_apply
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


class TensorsInListToApply(Rule):
    code = "GL206"
    name = "tensors-in-list-to-apply"
    severity = Severity.ERROR
    summary = "tensors passed to .apply inside a list/tuple/dict: silently not differentiated"
    markers = (("autograd", ".apply("),)
    doc = """
## What it does
Flags `MyFn.apply(...)` (MyFn an autograd Function defined in the same file) with a list, tuple
or dict argument, written in place (`MyFn.apply([x, y])`) or bound to a name in the same function
(`xs = [x, y]; MyFn.apply(xs)`). A call that also unpacks arguments (`MyFn.apply(group, bufs,
*grads)`) is taken to pass its tensors that way and is not reported, and so is a display that can
hold nothing to differentiate: literals, True/False/None, names used for sizes and options, and
names of index tensors (`(3, 3, 3)`, `(kernel_size, stride)`, `{"mode": "sum"}`,
`(in_idx, out_idx, counts)`). A container is reported only when it is known to hold a tensor
(`[w, w.t()]`) or forward uses what it receives there as tensors (`torch.cat(xs)`,
`xs[0].contiguous()`): a list of enum values or options handed on to a kernel is not.

## Why is this bad?
Measured on torch 2.13: autograd only tracks tensors passed as arguments themselves. Tensors inside
a container raise no error, and no gradient reaches them: training silently stops updating
whatever produced them. The output requires grad only through tensors passed as arguments of their
own: with none, it comes back with `requires_grad=False`; with one beside the list
(`Mix.apply(x, [w])`), it requires grad and backward gives `x` a gradient and `w` none.

## Example
```python
out = GatherMany.apply([feat_a, feat_b], index)
```

## Use instead
```python
out = GatherMany.apply(index, feat_a, feat_b)   # forward(ctx, index, *feats)
```
"""
    VALID = (
        """
import torch
class Cat(torch.autograd.Function):
    @staticmethod
    def forward(ctx, *xs):
        return torch.cat(xs)
def run(a, b):
    xs = [a, b]
    return Cat.apply(*xs)
""",
        """
import torch
class VoxelConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feats, weight, kernel_size, options):
        return feats @ weight
def conv(feats, weight, stride):
    window = (3, 3, 3)
    kmap = (in_idx, out_idx, counts)
    return VoxelConv.apply(feats, weight, (3, 3, 3), {"mode": "sum", "stride": stride}) + \
        VoxelConv.apply(feats, weight, window, [1, -1]) + VoxelConv.apply(feats, weight, kmap, None)
""",
    )
    INVALID = (
        Invalid("""
import torch
class Cat(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xs):
        return torch.cat(xs)
def run(a, b):
    pair = [a, b]
    y = Cat.apply(pair)
    return Cat.apply((a, b)) + y
""", ("y = Cat.apply(pair)", "return Cat.apply((a, b))")),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for argument in containers_passed_to_apply(model):
            name = argument.function
            yield Hit(argument.node, (
                f"{name}.apply gets tensors inside a container: no gradient reaches them; pass each as its "
                "own argument"), subject=name)
