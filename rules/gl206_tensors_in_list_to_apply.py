from __future__ import annotations

from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint.file_model import FileModel
from gradlint.findings import Severity
from gradlint.prescan import child_nodes
from gradlint.rule import Hit, Invalid, Rule

_CONTAINERS = (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.GeneratorExp, cst.DictComp)


def container_names(function: cst.FunctionDef | None, module: cst.Module) -> set[str]:
    """Names every assignment of which (in the function, or at module level) is a container literal."""
    containers: set[str] = set()
    others: set[str] = set()
    stack: list[cst.CSTNode] = [function.body if function is not None else module]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node is not function:
            continue
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    (containers if isinstance(node.value, _CONTAINERS) else others).add(target.target.value)
        stack.extend(child_nodes(node))
    return containers - others


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
*grads)`) is taken to pass its tensors that way and is not reported.

## Why is this bad?
Measured on torch 2.13: autograd only tracks tensors passed as arguments themselves. Tensors inside
a container raise no error, and the output comes back with `requires_grad=False`: no gradient
reaches them, and training silently stops updating whatever produced them.

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
        containers_by_function: dict[int, set[str]] = {}
        for site in model.call_sites:
            name = model.function_class_call(site.call, "apply")
            if name is None:
                continue
            if any(arg.star for arg in site.call.args):
                continue  # tensors also passed unpacked: the container is taken to be a non-tensor argument
            key = id(site.function)
            if key not in containers_by_function:
                containers_by_function[key] = container_names(site.function, model.module)
            containers = containers_by_function[key]
            for arg in site.call.args:
                if arg.star or arg.keyword is not None:
                    continue
                value = arg.value
                if isinstance(value, _CONTAINERS) or (isinstance(value, cst.Name) and value.value in containers):
                    yield Hit(site.call, (
                        f"{name}.apply gets tensors inside a container: autograd does not see them, so the "
                        "output does not require grad and no gradient reaches them (no error, measured torch "
                        f"2.13); pass each tensor as its own argument ({name}.apply(*tensors))"), subject=name)
                    break
