"""What a type annotation, or an `isinstance` test, says a value is.

An annotation is evidence only for what it says: `Tensor` is a tensor, `Optional[Tensor]` a
tensor or None (save_for_backward takes None, so as good as a tensor for what ctx keeps),
`Union[int, Tensor]` either one (unknown), `List[Tensor]` a container of tensors (not a tensor:
save_for_backward raises TypeError on a list), `int`, `bool`, `torch.dtype` or a class of
anyone's no tensor. `Tensor | tuple[Tensor, Tensor]` is unknown too, but remembers that it is one
tensor or a container of them (an unknown value whose `item` is a tensor), so an isinstance test
that tells the two apart (`if isinstance(x, tuple): a, b = x else: a = x`) makes each branch known.
"""

from __future__ import annotations

import libcst as cst

from gradlint.names import ImportTable, dotted
from gradlint.values import SCALAR, UNKNOWN, Kind, Val

_NONE = object()  # `None` in a Union: drops out, tensor-or-None is kept as a tensor

_CONTAINERS = frozenset({
    "List", "list", "Tuple", "tuple", "Sequence", "MutableSequence", "Iterable", "Iterator", "Set", "set",
    "FrozenSet", "frozenset", "Collection", "Deque", "deque",
})
_MAPPINGS = frozenset({"Dict", "dict", "Mapping", "MutableMapping", "OrderedDict", "DefaultDict", "defaultdict"})
_UNIONS = frozenset({"Union", "typing.Union"})
_OPTIONALS = frozenset({"Optional", "typing.Optional"})
_WRAPPERS = frozenset({"Annotated", "typing.Annotated", "Final", "typing.Final", "ClassVar", "typing.ClassVar"})
_ANYTHING = frozenset({"Any", "typing.Any", "object", "TypeVar"})
# An int64 tensor by its type: `index: torch.LongTensor`.
_INT64_TENSORS = frozenset({"LongTensor", "cuda.LongTensor"})


def _is_tensor_class(name: str) -> bool:
    """`torch.Tensor`, `Tensor`, `nn.Parameter`, `torch.LongTensor`, a tensor subclass named as one
    (`Float8TrainingTensor`). A tensor subclass that does not say so reads as no tensor."""
    last = name.rsplit(".", 1)[-1]
    return last.endswith("Tensor") or last in ("Parameter", "Buffer")


def annotated_value(node: cst.BaseExpression, imports: ImportTable) -> Val:
    found = _classify(node, imports, depth=0)
    return UNKNOWN if found is _NONE else found


def _classify(node: cst.BaseExpression, imports: ImportTable, depth: int):
    if depth > 8:
        return UNKNOWN
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        text = node.evaluated_value if isinstance(node, cst.SimpleString) else None
        if not isinstance(text, str):
            return UNKNOWN
        try:
            inner = cst.parse_expression(text)
        except Exception:  # noqa: BLE001 - a string annotation that is not Python: says nothing
            return UNKNOWN
        return _classify(inner, imports, depth + 1)
    if isinstance(node, cst.Name) and node.value == "None":
        return _NONE
    if isinstance(node, (cst.Name, cst.Attribute)):
        name = imports.qualify(node) or ""
        if name in _ANYTHING or name.rsplit(".", 1)[-1] in _ANYTHING:
            return UNKNOWN
        if _is_tensor_class(name):
            last = name.removeprefix("torch.")
            return Val(Kind.TENSOR, int64=last in _INT64_TENSORS)
        last = name.rsplit(".", 1)[-1]
        if last in _CONTAINERS or last in _MAPPINGS:
            return Val(Kind.CONTAINER)
        return SCALAR  # int, float, bool, str, dtype, device, Size, a process group, a config class
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        return _union([node.left, node.right], imports, depth)
    if isinstance(node, cst.Subscript):
        head = imports.qualify(node.value) if isinstance(node.value, (cst.Name, cst.Attribute)) else None
        if head is None:
            return UNKNOWN
        args = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
        last = head.rsplit(".", 1)[-1]
        if head in _OPTIONALS or last == "Optional":
            return _union(args + [cst.Name("None")], imports, depth)
        if head in _UNIONS or last == "Union":
            return _union(args, imports, depth)
        if head in _WRAPPERS or last in ("Annotated", "Final", "ClassVar"):
            return _classify(args[0], imports, depth + 1) if args else UNKNOWN
        if last in _CONTAINERS or last in _MAPPINGS:
            items = args[-1:] if last in _MAPPINGS else [a for a in args if not isinstance(a, cst.Ellipsis)]
            kinds = [_classify(a, imports, depth + 1) for a in items]
            kinds = [k for k in kinds if k is not _NONE]
            item = kinds[0] if kinds and all(k.kind is kinds[0].kind for k in kinds) else UNKNOWN
            return Val(Kind.CONTAINER, item=item)
        if _is_tensor_class(head):  # TensorType["batch", float] and the like
            return Val(Kind.TENSOR)
        return UNKNOWN
    return UNKNOWN


def _union(members: list[cst.BaseExpression], imports: ImportTable, depth: int):
    kinds = [_classify(m, imports, depth + 1) for m in members]
    kinds = [k for k in kinds if k is not _NONE]
    if not kinds:
        return _NONE
    first = kinds[0]
    if all(k.kind is first.kind for k in kinds) and first.kind is not Kind.UNKNOWN:
        return first if first.kind is not Kind.TENSOR else Val(Kind.TENSOR, int64=all(k.int64 for k in kinds))
    tensors = [k if k.kind is Kind.TENSOR else k.item for k in kinds if k.kind is Kind.TENSOR or tensor_or_tensors(k)
               or (k.kind is Kind.CONTAINER and k.item is not None and k.item.kind is Kind.TENSOR)]
    if len(tensors) == len(kinds):  # one tensor or a container of them: see the module's doc
        return Val(item=Val(Kind.TENSOR, int64=all(t.int64 for t in tensors)))
    return UNKNOWN


def tensor_or_tensors(value: Val) -> bool:
    """The value of a `Tensor | tuple[Tensor, ...]` annotation (see the module's doc)."""
    return value.kind is Kind.UNKNOWN and value.item is not None and value.item.kind is Kind.TENSOR


# What `torch.is_tensor(x)` tests, as isinstance's second argument (classified by its name).
_TENSOR_TYPE = cst.Name("Tensor")


def isinstance_test(test: cst.BaseExpression,
                    imports: ImportTable | None = None) -> tuple[str, cst.BaseExpression, bool, cst.BaseExpression] | None:
    """`isinstance(x, T)` -> ("x", T, True, x); `not isinstance(x, T)` -> ("x", T, False, x); the
    subject may be a dotted attribute (`isinstance(inp.attn_bias, torch.Tensor)`). With the
    file's imports, `torch.is_tensor(x)` is `isinstance(x, torch.Tensor)` (torch-ngp's loss:
    `if torch.is_tensor(interval): save it, else: ctx.interval = interval`, a number there)."""
    positive = True
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, positive = test.expression, not positive
    if imports is not None and isinstance(test, cst.Call) and len(test.args) == 1 \
            and imports.qualify(test.func) == "torch.is_tensor":
        subject = test.args[0].value
        name = dotted(subject)
        if name is None or test.args[0].keyword is not None or test.args[0].star:
            return None
        return name, _TENSOR_TYPE, positive, subject
    if not (isinstance(test, cst.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2):
        return None
    subject, types = test.args[0].value, test.args[1].value
    name = dotted(subject)  # `x`, or `inp.attn_bias`: the walk keeps dotted names read in a branch
    if name is None or any(a.keyword is not None or a.star for a in test.args):
        return None
    return name, types, positive, subject


def narrowed(value: Val, types: cst.BaseExpression, positive: bool, imports: ImportTable) -> Val | None:
    """What `value` is where `isinstance(value, types)` is known to be `positive`; None when the
    test says nothing new. A tuple of types is a union."""
    members = list(types.elements) if isinstance(types, (cst.Tuple, cst.List)) else None
    found = _union([m.value for m in members], imports, 0) if members is not None else _classify(types, imports, 0)
    if found is _NONE or found.kind is Kind.UNKNOWN:
        return None
    either = tensor_or_tensors(value)
    if positive:
        if found.kind is Kind.TENSOR:
            return value.with_(kind=Kind.TENSOR, item=None) if value.kind is not Kind.TENSOR else value
        if found.kind is not value.kind:
            # `isinstance(x, tuple)` of a `Tensor | tuple[Tensor, Tensor]`: a container of those tensors
            keeps_item = either and found.kind is Kind.CONTAINER and found.item is None
            return value.with_(kind=found.kind, graph=False, item=value.item if keeps_item else found.item)
        return value
    # `not isinstance(x, torch.Tensor)`: x is no tensor here; `not isinstance(x, int)` says little,
    # but `not isinstance(x, tuple)` of a `Tensor | tuple[Tensor, Tensor]` leaves the tensor.
    if found.kind is Kind.TENSOR and value.kind in (Kind.TENSOR, Kind.UNKNOWN):
        return value.with_(kind=Kind.SCALAR, graph=False, item=None)
    if found.kind is Kind.CONTAINER and either:
        return value.with_(kind=Kind.TENSOR, item=None, int64=value.item.int64)
    return None
