"""`.data` on tensors inside an autograd Function's forward, setup_context and backward.

One question, `tensor_data_uses(model)`: every `<tensor>.data` read, assigned (`x.data = y`) or
updated (`x.data += y`) in the methods a Function runs, each def once, with whether the use only
reads metadata or copies (`x.data.shape`, `x.data.size()`, `x.data.clone()`,
`x.data.cpu().numpy()`). The value must be a tensor as far as the analysis can tell; `.data`
itself is no evidence (a graph library's `batch.data` is not one).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradlint import torch_api as api
from gradlint.file_model import AutogradFunction, FileModel, leading_params
from gradlint.flow import AttributeStore, FunctionRole, Walk, Walker
from gradlint.names import dotted
from gradlint.prescan import Prescan, child_nodes
from gradlint.values import Kind, Val


@dataclass(frozen=True)
class DataUse:
    """One `.data` on a tensor in a Function's method."""

    node: cst.CSTNode  # the `x.data` (the assignment target, for a store)
    statement: cst.CSTNode  # the statement holding it: `out.data = out.data / n` is one statement
    function: str  # the Function's name
    method: str  # forward, setup_context or backward
    access: str  # "read", "assigned" (`x.data = y`), "updated" (`x.data += y`)
    shown: str  # the expression as written: `weight.data`, `ctx.scale.data`
    copy_or_metadata: bool  # what follows makes a copy or reads metadata: nothing aliases the storage


def tensor_data_uses(model: FileModel) -> list[DataUse]:
    """The `.data` uses of every Function's forward, setup_context and backward, method by
    method; the stores of a method first, then its reads, in walk order."""
    uses = []
    seen: set[int] = set()
    for function in model.function_classes:
        ctx_tensors: set[str] = set()
        for role, method in (("forward", function.forward), ("setup_context", function.setup_context),
                             ("backward", function.backward)):
            if method is None or id(method) in seen:
                continue
            seen.add(id(method))
            walk = _walk(model, function, role, method, frozenset(ctx_tensors))
            if walk is None:
                continue
            walker, events = walk
            # ctx.weight = weight in forward: a tensor in backward too
            ctx_tensors.update(e.attribute for e in events if e.owner.kind is Kind.CTX and e.value.is_tensor)
            found = [(e.target, "updated" if e.augmented else "assigned", f"{e.owner_name}.data") for e in events
                     if e.attribute == "data" and e.owner.is_tensor and e.target is not None]
            found += [(node, "read", dotted(node) or "tensor.data") for node in walker.reads.values()]
            if not found:
                continue
            parents = _parents(method)
            uses += [DataUse(node, _statement_of(node, parents), function.name, role, access, shown,
                             _harmless(node, parents)) for node, access, shown in found]
    return uses


# `.data` followed by one of these makes a new tensor or a Python value: nothing aliases the storage.
_FRESH_METHODS = api.SCALAR_METHODS | {"clone", "new", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}
# These return the same storage on a CPU tensor: harmless only if what follows is.
_PASS_THROUGH_METHODS = frozenset({"cpu"})


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


def _walk(model: FileModel, function: AutogradFunction, role: str, method: cst.FunctionDef,
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
