from __future__ import annotations

import ast
from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint import torch_api as api
from gradlint.file_model import AutogradFunction, FileModel, leading_params
from gradlint.findings import Severity
from gradlint.flow import AttributeStore, FunctionRole, Walk, Walker
from gradlint.names import dotted
from gradlint.prescan import Prescan, child_nodes
from gradlint.rule import Hit, Invalid, Rule
from gradlint.values import Kind, Val

_WALKED = frozenset({"forward", "setup_context", "backward"})
# `.data` followed by one of these makes a new tensor or a Python value: nothing aliases the storage.
_FRESH_METHODS = api.SCALAR_METHODS | {"clone", "new", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}
# These return the same storage on a CPU tensor: harmless only if what follows is.
_PASS_THROUGH_METHODS = frozenset({"cpu"})

_WHY = ("`.data` returns a tensor that shares the storage but not the version counter, so autograd cannot see "
        "in-place changes made through it and gradients can be silently wrong (measured, torch 2.13: a tensor "
        "another op had saved, changed through `.data`, gave a wrong gradient with no error; the same change "
        "through `.detach()` raised `RuntimeError: one of the variables needed for gradient computation has been "
        "modified by an inplace operation`)")
_FIX = "use `.detach()`, which shares the version counter, or do the work under `torch.no_grad()`"


class _HideData(cst.CSTTransformer):
    """`x.data` becomes an anonymous name, so that `.data` alone is no evidence that `x` is a tensor
    (a graph library's `batch.data` is not one)."""

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        return cst.Name("_gradlint_data") if updated_node.attr.value == "data" else updated_node


class _DataRecorder(Walker):
    """Walks a Function method as the analysis does and keeps every `<tensor>.data` it reads."""

    def __init__(self, walk: Walk, function: cst.FunctionDef, ctx_tensors: frozenset[str]):
        super().__init__(walk, function)
        self.ctx_tensors = ctx_tensors
        self.reads: dict[int, cst.Attribute] = {}

    def _attribute(self, e: cst.Attribute, base: Val | None = None) -> Val:
        if base is None:
            base = self.ev(e.value)
        attr = e.attr.value
        if base.kind is Kind.CTX and attr in self.ctx_tensors:
            return Val(Kind.TENSOR)  # ctx.weight = weight in forward: a tensor in backward too
        if attr == "data" and base.is_tensor:
            self.reads[id(e)] = e
        return super()._attribute(e, base)


def _scan_without_data(model: FileModel, function: cst.FunctionDef) -> Prescan:
    return Prescan(function.visit(_HideData()), frozenset(model.imports.aliases))


def _parents(function: cst.FunctionDef) -> dict[int, cst.CSTNode]:
    parents: dict[int, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        for child in child_nodes(node):
            parents[id(child)] = node
            stack.append(child)
    return parents


def _harmless(node: cst.BaseExpression, parents: dict[int, cst.CSTNode]) -> bool:
    """`x.data.shape`, `x.data.size()`, `x.data.clone()`, `x.data.cpu().numpy()`: metadata or a copy."""
    attribute = parents.get(id(node))
    if not isinstance(attribute, cst.Attribute) or attribute.value is not node:
        return False
    if attribute.attr.value in api.SCALAR_ATTRIBUTES:
        return True
    call = parents.get(id(attribute))
    if not isinstance(call, cst.Call) or call.func is not attribute:
        return False
    if attribute.attr.value in _FRESH_METHODS:
        return True
    return attribute.attr.value in _PASS_THROUGH_METHODS and _harmless(call, parents)


def _statement_of(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> cst.CSTNode:
    while not isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement)) and id(node) in parents:
        node = parents[id(node)]
    return node


class DataInFunction(Rule):
    code = "GL304"
    name = "data-in-function"
    severity = Severity.WARNING
    summary = "tensor.data read or written inside an autograd Function: in-place changes escape version checks"
    markers = (("autograd", ".data"), ("register_autograd", ".data"))
    doc = f"""
## What it does
Flags `.data` read or assigned on a tensor inside a custom autograd Function's `forward`,
`setup_context` or `backward` (classes and `torch.library.custom_op` with `register_autograd`):
`x.data`, `ctx.weight.data`, `out.data.copy_(...)`, `grad.data = ...`. The value must be a tensor
as far as the analysis can tell: a forward input used as one (`.data` itself does not count), what
`ctx.saved_tensors` gives, a tensor kept on ctx in forward, the result of a torch op, or an incoming
gradient in backward. `batch.data` on an unknown object, and `.data` outside Functions, are not
reported; nor are uses that only read metadata or copy (`x.data.shape`, `x.data.size()`,
`x.data.clone()`, `x.data.cpu().numpy()`).

## Why is this bad?
{_WHY}. Assigning `x.data = y` also swaps the storage without a version bump
(measured: a forward input that another op had saved, replaced through `x.data = ...`, gave a
wrong gradient with no error).
Inside a Function this hides exactly the bugs autograd's version check exists to catch: a saved
input or output changed in place before backward runs.

## Example
```python
@staticmethod
def forward(ctx, x, weight):
    weight.data.clamp_(-1.0, 1.0)
    ctx.save_for_backward(x, weight)
    return x @ weight
```

## Use instead
```python
@staticmethod
def forward(ctx, x, weight):
    with torch.no_grad():
        weight.clamp_(-1.0, 1.0)  # or weight.detach().clamp_(-1.0, 1.0)
    ctx.save_for_backward(x, weight)
    return x @ weight
```
"""
    VALID = (
        """
import torch
class Normalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, batch):
        ctx.num_graphs = batch.data.num_graphs
        rows = x.data.shape[0]
        norm = x.detach().norm(dim=-1, keepdim=True).clamp_min(1e-6)
        stats = x.data.cpu().numpy()
        ctx.save_for_backward(x, norm)
        return x / norm
    @staticmethod
    def backward(ctx, grad):
        x, norm = ctx.saved_tensors
        copy = grad.data.clone()
        return copy / norm, None
""",
        """
import torch
class Trainer:
    def step(self, model, batch):
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.1)
        return batch.data
class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cache):
        ctx.cache = cache
        cache.data = x.size(0)
        return x.clone()
    @staticmethod
    def backward(ctx, grad):
        return grad, None
""",
    )
    INVALID = (
        Invalid("""
import torch
class ClippedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        weight.data.clamp_(-1.0, 1.0)
        ctx.save_for_backward(x, weight)
        return x @ weight
    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad.data.mul_(0.5)
        return grad @ weight.t(), x.t() @ grad
""", ("weight.data.clamp_(-1.0, 1.0)", "grad.data.mul_(0.5)")),
        Invalid("""
import torch
class Renorm(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        out = x * scale
        out.data = out.data / out.norm()
        return out
    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.scale = scale
        ctx.save_for_backward(output.data)
    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        ctx.scale.data.fill_(1.0)
        return grad * out, None
""", ("out.data = out.data / out.norm()", "ctx.save_for_backward(output.data)", "ctx.scale.data.fill_(1.0)")),
    )

    def precheck(self, tree) -> bool:
        """A Function and a `.data` in a def the check walks: a method named forward,
        setup_context or backward (inherited ones are defs of the file too), or with
        register_autograd in the file, any def (a custom op's functions have any name)."""
        if not prechecks.has_autograd_function(tree):
            return False
        any_def = prechecks.mentions_register_autograd(tree)
        return any((any_def or node.name in _WALKED) and any(
            isinstance(inner, ast.Attribute) and inner.attr == "data" for inner in ast.walk(node))
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        seen: set[int] = set()
        for function in model.function_classes:
            ctx_tensors: set[str] = set()
            for role, method in (("forward", function.forward), ("setup_context", function.setup_context),
                                 ("backward", function.backward)):
                if method is None or id(method) in seen:
                    continue
                seen.add(id(method))
                walk = self._walk(model, function, role, method, frozenset(ctx_tensors))
                if walk is None:
                    continue
                walker, events = walk
                ctx_tensors.update(e.attribute for e in events
                                   if e.owner.kind is Kind.CTX and e.value.is_tensor)
                found = [(e.target, f"{'updating' if e.augmented else 'assigning'} `{e.owner_name}.data`") for e in events
                         if e.attribute == "data" and e.owner.is_tensor and e.target is not None]
                found += [(node, f"`{dotted(node) or 'tensor.data'}`") for node in walker.reads.values()]
                if not found:
                    continue
                parents = _parents(method)
                reported: set[int] = set()
                for node, what in found:
                    statement = _statement_of(node, parents)
                    if id(statement) in reported or _harmless(node, parents):
                        continue
                    reported.add(id(statement))  # `out.data = out.data / n` is one finding
                    yield Hit(node, f"{what} in {function.name}.{role}: {_WHY}; {_FIX}",
                              subject=f"{function.name}.{role}")

    def _walk(self, model: FileModel, function: AutogradFunction, role: str, method: cst.FunctionDef,
              ctx_tensors: frozenset[str]) -> tuple[_DataRecorder, list[AttributeStore]] | None:
        params = list(method.params.params)[leading_params(method):]
        has_ctx = role != "forward" or function.style == "ctx"
        if has_ctx and not params:
            return None
        ctx = params[0].name.value if has_ctx else None
        walk = Walk(model, method, FunctionRole(role, ctx_name=ctx, owner_class=function.name))
        walker = _DataRecorder(walk, method, ctx_tensors)
        bound: dict[str, Val] = {ctx: Val(Kind.CTX)} if ctx is not None else {}
        if role == "forward":
            scan = _scan_without_data(model, method)
            for param in params[1:] if has_ctx else params:
                bound[param.name.value] = model.input_value(param, scan)
        elif role == "setup_context":
            if len(params) < 3:
                return None
            forward = function.forward
            inputs = ()
            if forward is not None:
                scan = _scan_without_data(model, forward)
                inputs = tuple(model.input_value(p, scan) for p in function.forward_inputs or ())
            output = params[-1] if len(params) >= 4 else params[2]
            bound[params[1].name.value] = Val(Kind.CONTAINER, elements=inputs)
            bound[output.name.value] = model.output_value(function)
        else:
            bound.update((p.name.value, Val(Kind.TENSOR)) for p in params[1:])  # incoming gradients
        walker.bind_params(bound)
        walker.run()
        return walker, list(walk.of(AttributeStore))
