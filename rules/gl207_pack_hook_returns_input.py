from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, pack_hooks
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


class PackHookReturnsInput(Rule):
    code = "GL207"
    name = "pack-hook-returns-input"
    severity = Severity.ERROR
    summary = "a saved_tensors_hooks pack hook returns its argument: saved outputs are never freed if backward does not run"
    markers = ("saved_tensors_hooks",)
    doc = """
## What it does
Flags the `return` of a `torch.autograd.graph.saved_tensors_hooks` pack hook (a `def` in the same
file, a method passed as `self.pack`, or a lambda) that gives back the tensor it received, alone
or in a tuple (`return t`, `return t, device`, `lambda t: t`), also when the hook first stores it
in a cache. Hooks passed to `saved_tensors_hooks(pack, unpack)` (any import form) and to
`super().__init__(pack, unpack)` in a subclass are checked.

Not reported: a return on a branch for tensors that cannot be an op's output (a test on
`is_leaf`, `grad_fn`, `requires_grad`, `nn.Parameter`), an argument rebound first
(`t = t.to("cpu")`), and returning a handle or `t.detach()`.

## Why is this bad?
Measured on torch 2.13: when an op saves its own output (`exp`, `sigmoid`, `tanh`, `relu`,
`softmax`, ...), the tensor the pack hook returns is kept by that op's backward node. Returned as
is, it is the output itself, which points back to the node: a reference cycle through autograd's
C++ objects that Python's collector cannot see. If backward never runs on that graph (evaluation
under grad mode, an exception or a skipped loss between forward and backward), the output and
every tensor saved upstream of it stay alive for good: 50 of 50 outputs of `exp` were still alive
after `gc.collect()`, and an MLP step kept its ReLU output and its input (196608 B per step).
Returning `t.detach()` leaks nothing, with the same gradients; once backward runs the saved slots
are released and nothing leaks either, which is why the bug hides in training and shows in
evaluation. A hook that offloads can return a handle (a key into its own store) instead.

## Example
```python
def pack(t):
    return t

def unpack(t):
    return t

with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    loss = model(x).sum()
```

## Use instead
```python
def pack(t):
    return t.detach()

def unpack(t):
    return t

with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    loss = model(x).sum()
```
"""
    VALID = (
        """
import torch
from torch.autograd.graph import saved_tensors_hooks
def pack(t):
    return t.detach()
def unpack(t):
    return t
def offload(t):
    t = t.to("cpu", non_blocking=True)
    return t
def run(model, x):
    with saved_tensors_hooks(pack, unpack):
        y = model(x)
    with saved_tensors_hooks(offload, lambda t: t):
        z = model(y)
    h = y.register_hook(lambda g: g)
    return z
""",
        """
import torch
from torch import nn
class CpuOffload(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self, min_numel=1024):
        self.stash = {}
        self.min_numel = min_numel
        super().__init__(self.pack, self.unpack)
    def pack(self, t):
        if isinstance(t, nn.Parameter) or t.grad_fn is None:
            return t
        key = len(self.stash)
        self.stash[key] = t.to("cpu")
        return key
    def unpack(self, key):
        if isinstance(key, torch.Tensor):
            return key
        return self.stash.pop(key).to("cuda")
""",
        """
import torch
def identity(t):
    return t
with torch.autograd.graph.save_on_cpu():
    pass
handle = tensor.register_hook(identity)
""",
    )
    INVALID = (
        Invalid("""
import torch
from torch.autograd.graph import saved_tensors_hooks as hooks
CACHE = []
def pack_hook(tensor):
    CACHE.append(tensor)
    return tensor
def unpack_hook(packed):
    return packed
def evaluate(model, x):
    with hooks(pack_hook, unpack_hook):
        return model(x)
def debug(model, x):
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: (t, t.device),
            lambda p: p[0]):
        return model(x)
""", ("return tensor", "lambda t: (t, t.device),")),
        Invalid("""
import torch
from torch.autograd import graph
class Offload(graph.saved_tensors_hooks):
    def __init__(self, min_numel):
        self.min_numel = min_numel
        super().__init__(self.pack, self.unpack)
    def pack(self, activation):
        if activation.numel() < self.min_numel:
            return activation
        cpu = activation.to("cpu")
        return (cpu, activation.device)
    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        cpu, device = packed
        return cpu.to(device)
""", ("return activation",)),
        Invalid("""
import torch
def checkpointed(block, x):
    def keep(t):
        alias = t
        return alias
    with torch.autograd.graph.saved_tensors_hooks(pack_hook=keep, unpack_hook=lambda t: t):
        return block(x)
""", ("return alias",)),
    )

    def precheck(self, tree) -> bool:
        """A call of saved_tensors_hooks (under any import name), of its __init__, or a subclass."""
        return prechecks.uses_class(tree, "saved_tensors_hooks")

    def check(self, model: FileModel) -> Iterator[Hit]:
        for hook in pack_hooks(model):
            shown = f"`{hook.name}`" if hook.name else "lambda"
            for node in hook.returns_its_argument:
                yield Hit(node, (
                    f"pack hook {shown} returns its input: saved outputs leak, even past gc, if backward never runs; "
                    "return t.detach()"), subject=hook.name or "saved_tensors_hooks.pack")
