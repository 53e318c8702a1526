"""Tensors handed to a Function's apply inside a container, where autograd never looks.

One question, `containers_passed_to_apply(model)`: the `MyFn.apply(...)` calls given a list, tuple
or dict (a display, or a name every assignment of which is one) that holds a tensor to
differentiate, known from its members or from how forward uses what it gets there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from gradlint.file_model import FileModel
from gradlint.flow import FunctionApplied, looks_like_scalar
from gradlint.prescan import child_nodes
from gradlint.values import Kind


@dataclass(frozen=True)
class ContainerArgument:
    """An apply call given tensors inside a container: no gradient reaches them."""

    node: cst.Call  # the apply call
    function: str  # the Function's name


_CONTAINERS = (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.GeneratorExp, cst.DictComp)
# Integer index tensors need no gradient: a container of them loses nothing (kernel maps, masks).
_INDEX_LIKE = re.compile(r"(^|_)(idx|index|indices|ids|mask|masks|counts?|offsets?|ptr|kmap)(_|$)")
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _never_tensor(node: cst.BaseExpression, indexes: bool = False) -> bool:
    """A literal, True/False/None, a name used for sizes and options (`stride`, `kernel_size`), with
    `indexes` also a name of index tensors (`in_idx`, `mask`, `counts`), or a display of those:
    `(3, 3, 3)`, `{"mode": "sum"}`, `(in_idx, out_idx)` hold nothing autograd must differentiate."""
    if isinstance(node, _LITERALS):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None") or looks_like_scalar(node.value) \
            or (indexes and bool(_INDEX_LIKE.search(node.value)))
    if isinstance(node, cst.UnaryOperation):
        return _never_tensor(node.expression, indexes)
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        return all(not isinstance(e, cst.StarredElement) and _never_tensor(e.value, indexes) for e in node.elements)
    if isinstance(node, cst.Dict):
        return all(isinstance(e, cst.DictElement) and _never_tensor(e.value, indexes) for e in node.elements)
    if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
        return _never_tensor(node.elt, indexes)
    if isinstance(node, cst.DictComp):
        return _never_tensor(node.value, indexes)
    return False


def _may_hold_tensors(node: cst.BaseExpression, indexes: bool = False) -> bool:
    return isinstance(node, _CONTAINERS) and not _never_tensor(node, indexes)


def _forward_uses_as_tensors(model: FileModel, function, position: int) -> bool:
    """Whether forward uses what it receives at `position` of apply as tensors (or as a container
    of them); an argument forward only hands on, to a kernel or a helper, says nothing."""
    forward = function.forward if function is not None else None
    if forward is None:
        return False
    params = function.forward_parameters()
    scan = model.prescan(forward)
    if position < len(params):
        received = model.input_value(params[position], scan)
        if received.kind is Kind.TENSOR:
            return True
        if received.kind is not Kind.CONTAINER:
            return False
        # A container: of tensors when its annotation says so (`xs: list[torch.Tensor]`) or forward
        # uses its items as tensors (`xs[0].contiguous()`). An annotation alone (`new_shape: tuple`,
        # `sizes: list[int]`) makes it a container and says nothing of tensors in it.
        name = params[position].name.value
        return any(m.is_tensor for m in received.members()) or name in scan.tensor_holders
    star = forward.params.star_arg
    if isinstance(star, cst.Param):  # forward(ctx, *tensors): what lands in it is used as tensors
        name = star.name.value
        return name in scan.tensor_uses or name in scan.item_uses or name in scan.tensor_holders
    return False


def _container_names(function: cst.FunctionDef | None, module: cst.Module) -> set[str]:
    """Names every assignment of which (in the function, or at module level) is a container display
    that may hold a tensor to differentiate."""
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
                    (containers if _may_hold_tensors(node.value, indexes=True) else others).add(target.target.value)
        stack.extend(child_nodes(node))
    return containers - others


def containers_passed_to_apply(model: FileModel) -> list[ContainerArgument]:
    """In the order the defs holding the calls first pass a container display; one per call."""
    found = []
    containers_by_function: dict[int, set[str]] = {}
    candidates: dict[int, tuple] = {}  # the defs whose apply calls pass a container display
    for site in model.call_sites:
        name = model.function_class_call(site.call, "apply")
        if name is None or any(arg.star for arg in site.call.args):
            continue  # tensors also passed unpacked: the container is taken to be a non-tensor argument
        key = id(site.function)
        if key not in containers_by_function:
            containers_by_function[key] = _container_names(site.function, model.module)
        function = model.function_class(name)
        inputs = function.forward_inputs if function is not None else None
        # A container of index tensors is fine as one argument of a forward that takes it as
        # one; with fewer arguments than forward's inputs it was meant to be unpacked.
        short = inputs is not None and len(site.call.args) < len(inputs)
        if any(arg.keyword is None and (_may_hold_tensors(arg.value, indexes=not short) or (
                isinstance(arg.value, cst.Name) and arg.value.value in containers_by_function[key]))
               for arg in site.call.args):
            candidates.setdefault(key, (site.function, set()))[1].add(id(site.call))
    for function_node, calls in candidates.values():
        # What each argument is, as the analysis reads it where the call is made.
        for event in model.walk_of(function_node).of(FunctionApplied):
            if id(event.call) not in calls:
                continue
            calls.discard(id(event.call))
            function = model.function_class(event.function_name)
            inputs = function.forward_inputs if function is not None else None
            short = inputs is not None and len(event.call.args) < len(inputs)
            containers = containers_by_function[id(function_node)]
            for position, (arg, value) in enumerate(event.arguments):
                expr = arg.value
                if arg.keyword is not None or not (_may_hold_tensors(expr, indexes=not short) or (
                        isinstance(expr, cst.Name) and expr.value in containers)):
                    continue
                # Only a container known to hold a tensor (`[w, w.t()]`), or one whose forward uses
                # what it gets there as tensors (`torch.cat(xs)`): a list of enum values or shapes
                # handed on to a kernel is none.
                if not (any(m.is_tensor for m in value.members()) or _forward_uses_as_tensors(model, function, position)):
                    continue
                found.append(ContainerArgument(event.call, event.function_name))
                break
    return found
