"""The abstract values of the tensor inference: what an expression is, as far as we can tell.

The inference is deliberately small and conservative (precision first): an expression is a
tensor, not a tensor, or unknown, and rules report only what is known. Everything a rule may ask
of a value (is it graph-attached? the Function's own output or a view of it? an int64 index?)
travels with it as a flag, so rules never re-derive it from syntax.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field, replace


class Kind(enum.Enum):
    TENSOR = "tensor"
    SCALAR = "not a tensor"  # Python numbers, shapes, dtypes, strings, bools
    UNKNOWN = "unknown"
    MODULE = "nn.Module instance"
    CTX = "autograd ctx"
    CONTAINER = "container"  # list/tuple/dict literal, or what a call returns several tensors in


_binding_ids = itertools.count(1)


def new_binding() -> int:
    return next(_binding_ids)


@dataclass(frozen=True)
class Val:
    kind: Kind = Kind.UNKNOWN
    # Part of an autograd graph that backward has not consumed: the result of a module call, a
    # loss, or anything computed from a parameter or another graph-attached value.
    graph: bool = False
    param: bool = False  # an nn.Parameter itself: a leaf, graph-free until used in an op
    int64: bool = False
    is_input: bool = False  # a forward input of an autograd Function (or an alias of one)
    # Identity of the Python object: the same id on every name that aliases it, so a ctx store
    # can be matched with what forward finally returns.
    binding: int | None = None
    view_of: frozenset[int] = frozenset()  # bindings whose storage this tensor is a view of
    elements: tuple["Val", ...] = ()  # a container's known elements, in order
    element_names: tuple[str, ...] = ()  # for named tuples: topk(...).indices
    item: "Val | None" = None  # a container whose elements are unknown in number but alike
    # An instance of this file's class of that name (an nn.Module's, or any); or, for a Function's
    # input annotated with a class of another module, that class by qualified name, whose declared
    # fields say what reading them gives (FileModel.class_attribute). A field per value costs every
    # value: 8% of a lint (measured), so the two share one.
    module_class: str | None = None
    # An instance of a plain class of another project module, by qualified name (`pkg.utils.meters.AverageMeter`):
    # its methods are walked in that module (FileModel.imported_method).
    project_class: str | None = None
    # Where a graph-attached value (or a module) came from when another project module decided
    # it: `l2_penalty() (pkg/losses.py:8)`, `MLP (pkg/layers.py:4)`. For messages only.
    origin: str | None = None
    # Names and dotted attributes read to compute this value: `self.h = f(self.h)` chains steps.
    reads: frozenset[str] = field(default=frozenset())
    none: bool = False  # the literal None
    # A view that may be a copy instead (`.contiguous()`, `.reshape()`, `.to()` return their
    # receiver or a new tensor, by its layout or dtype): not surely sharing its base's storage.
    may_copy: bool = False
    # Kind.TENSOR only assumed, not proven: what a module call returns (as often a tuple, a dict or
    # a ModelOutput), read out of one (by index, unpacking or attribute), or a tensor-or-None. A fix
    # that rewrites the value (`.detach()`) needs a proven tensor.
    assumed: bool = False
    # A tensor proven to hold one element (`.item()` gives its number): a full reduction
    # (`.mean()`, `.sum()` with no dim), a torch loss with its default reduction, what backward()
    # was called on without a gradient, arithmetic of those with Python numbers.
    one_element: bool = False
    # backward() ran on it without retain_graph: its graph is freed, so no working code runs a
    # backward through it again (a kept copy can lose its graph without changing any gradient).
    consumed: bool = False

    def with_(self, **changes) -> "Val":
        """dataclasses.replace without its per-field __init__: flow makes a value this way at
        most steps of a walk (17,480 times in 10 lints of the LSP bench's script, where replace
        took 28 of 295 ms under cProfile)."""
        if not changes:
            return self
        if not _FIELDS.issuperset(changes):
            return replace(self, **changes)  # raises the TypeError an unknown field deserves
        new = object.__new__(Val)
        state = new.__dict__
        state.update(self.__dict__)
        state.update(changes)
        return new

    @property
    def is_tensor(self) -> bool:
        return self.kind is Kind.TENSOR

    def members(self) -> tuple["Val", ...]:
        """The values a container holds, as far as they are known."""
        if self.kind is not Kind.CONTAINER:
            return ()
        return self.elements + ((self.item,) if self.item is not None else ())

    @property
    def proven_tensor(self) -> bool:
        return self.kind is Kind.TENSOR and not self.assumed and not self.none

    def holds_graph(self) -> bool:
        return self.graph or any(m.holds_graph() for m in self.members())

    def element(self, index: int | None) -> "Val":
        """What indexing or unpacking this value gives."""
        if self.kind is Kind.CONTAINER:
            if index is not None and -len(self.elements) <= index < len(self.elements):
                return self.elements[index]
            if self.item is not None:
                return self.item
            return UNKNOWN
        if self.kind is Kind.TENSOR:
            return view(self)
        if self.kind is Kind.MODULE:  # iterating or indexing nn.ModuleList / Sequential
            return Val(Kind.MODULE)
        if self.kind is Kind.SCALAR and not self.none:  # `b, n = x.shape`: numbers (subscripts give them too)
            return Val(Kind.SCALAR)
        return UNKNOWN


_FIELDS = frozenset(Val.__dataclass_fields__)
UNKNOWN = Val()
SCALAR = Val(Kind.SCALAR)
NONE = Val(Kind.SCALAR, none=True)  # the literal None: no tensor, but a tensor-or-None with a tensor


def tensor(*sources: Val, int64: bool = False, keep_graph: bool = True) -> Val:
    """A new tensor computed from `sources`: graph-attached if any source is, or is a parameter.
    An integer tensor never is (`logits.argmax(1)`: integer outputs never require grad)."""
    graph = keep_graph and not int64 and any(s.graph or s.param or _members_graph(s) for s in sources)
    reads = frozenset().union(*(s.reads for s in sources)) if sources else frozenset()
    return Val(Kind.TENSOR, graph=graph, int64=int64, reads=reads, origin=_origin(sources) if graph else None)


def _origin(vals) -> str | None:
    """The first place another module made one of `vals`' graphs (or modules)."""
    return next((v.origin for v in vals if v.origin is not None), None)


def _members_graph(v: Val) -> bool:
    return any(m.graph or m.param for m in v.members())


def view(base: Val, may_copy: bool = False, **changes) -> Val:
    """A tensor sharing `base`'s storage (slicing, .view, .t(), ...); with `may_copy`, one that may
    be a copy instead (`.contiguous()`, `.reshape()`)."""
    bases = base.view_of | ({base.binding} if base.binding is not None else set())
    return Val(
        Kind.TENSOR,
        graph=base.graph or base.param,
        int64=base.int64,
        is_input=base.is_input,
        view_of=frozenset(bases),
        reads=base.reads,
        may_copy=may_copy or base.may_copy,
        assumed=base.assumed or base.kind is not Kind.TENSOR,
        origin=base.origin,
    ).with_(**changes)


def combine(*vals: Val) -> Val:
    """Arithmetic on `vals`: a tensor if any operand is one."""
    if any(v.is_tensor for v in vals):
        tensors = [v for v in vals if v.is_tensor]
        # A tensor if one operand is proven one; `out * 2` on an assumed one may be a tuple's repeat.
        # One element when every tensor is, and the rest are Python numbers (`loss / n`).
        return tensor(*vals, int64=all(t.int64 for t in tensors)).with_(
            assumed=all(t.assumed for t in tensors),
            one_element=all(t.one_element for t in tensors) and all(
                v.is_tensor or (v.kind is Kind.SCALAR and not v.none) for v in vals))
    reads = frozenset().union(*(v.reads for v in vals))
    if all(v.kind is Kind.SCALAR for v in vals):
        return Val(Kind.SCALAR, reads=reads)
    if all(v.kind is Kind.CONTAINER for v in vals):  # tuple concatenation
        return Val(Kind.CONTAINER, elements=tuple(e for v in vals for e in v.elements), reads=reads)
    graph = any(v.graph for v in vals)
    return Val(graph=graph, reads=reads, origin=_origin(vals) if graph else None)


def either(a: Val, b: Val) -> Val:
    """What a name holds after two paths bound it: the later binding, except that None on one
    path and a tensor on the other is a tensor (or None)."""
    if a.none and b.is_tensor:
        return b.with_(assumed=True)
    if b.none and a.is_tensor:
        return a.with_(assumed=True)
    return b


def merge(a: Val, b: Val) -> Val:
    """One of two values (an `x if c else y`, two branches). `t if c else None` is a tensor or
    None: as good as a tensor for what ctx keeps (save_for_backward takes None)."""
    if a.none and not b.none:
        return b.with_(reads=a.reads | b.reads, assumed=True)
    if b.none and not a.none:
        return a.with_(reads=a.reads | b.reads, assumed=True)
    if a.kind is b.kind:
        return replace(a, graph=a.graph or b.graph, int64=a.int64 and b.int64, reads=a.reads | b.reads,
                       assumed=a.assumed or b.assumed, one_element=a.one_element and b.one_element,
                       origin=a.origin or b.origin)
    return Val(reads=a.reads | b.reads)
