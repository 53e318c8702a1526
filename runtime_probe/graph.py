"""Count the autograd nodes that live tensors keep reachable through their grad_fn.

`losses.append(loss)` after backward keeps 4 B of tensor per step but every step's nodes (704
nodes after 100 steps of a 2-layer MLP; `total_loss += loss`: 804, measured on torch 2.13): the
bytes barely move while the graph grows, so the probe counts the graph itself.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

_leaf = None


def sequence_mark() -> int:
    """The sequence number the next autograd node made on this thread will get.

    Nodes are numbered in creation order per thread (`Node._sequence_nr()`), so the marks taken
    before and after a step bound the nodes its forward made: with one step in K tracked, the
    probe counts only the tracked steps' nodes, as it counts only their bytes. A throwaway
    multiplication is the one public way to read the counter (it takes one number itself).
    """
    global _leaf
    import torch

    if _leaf is None:
        _leaf = torch.ones((), requires_grad=True)
    with torch.enable_grad():
        return (_leaf * 1).grad_fn._sequence_nr() + 1


def reachable_nodes(tensors: Iterable, ranges: list[tuple[int, int]] | None = None) -> int:
    """Nodes reachable from the tensors' grad_fn; with `ranges` (sorted [start, end) sequence
    numbers), only the nodes made inside them."""
    seen: set[int] = set()
    keep = []  # hold the node wrappers while counting so ids stay unique
    stack = []
    for t in tensors:
        fn = getattr(t, "grad_fn", None)
        if fn is not None:
            stack.append(fn)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        for child, _ in getattr(node, "next_functions", ()):
            if child is not None and id(child) not in seen:
                stack.append(child)
    if ranges is None:
        return len(seen)
    starts = [start for start, _ in ranges]
    inside = 0
    for node in keep:
        number = node._sequence_nr()
        at = bisect.bisect_right(starts, number) - 1
        if at >= 0 and number < ranges[at][1]:
            inside += 1
    return inside


def graph_roots(tensors: Iterable) -> list:
    """Tensors that carry a graph (grad_fn set)."""
    return [t for t in tensors if getattr(t, "grad_fn", None) is not None]


_saved_names: dict[type, tuple[str, ...]] = {}


def saved_tensors(root, seen: set[int], keep: list) -> Iterator:
    """Tensors saved inside the nodes reachable from `root`'s grad_fn that are not in `seen`
    (shared across roots, so a node is read once): what a branch backward never ran keeps.
    `keep` holds the node wrappers as long as `seen` is used: torch 2.11 frees a node's wrapper
    with its last Python reference (28 nodes read one at a time had 2 distinct ids; 28 on torch
    2.13), so a later root's node got a freed one's id and was skipped as seen.

    Built-in nodes expose each saved input or output as a `_saved_*` attribute; a custom
    Function's node as `saved_tensors`; AccumulateGrad its leaf as `variable` (a leaf made in the
    step, `interp` of a gradient penalty, is kept with its .grad by a graph that is kept). Reading
    one after backward freed it raises: skipped.
    """
    stack = [getattr(root, "grad_fn", None)]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        for name in _saved_attributes(node):
            try:
                value = getattr(node, name)
            except RuntimeError:
                continue
            for item in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(item, "untyped_storage"):  # also saved: sizes, scalars, None
                    yield item
        leaf = getattr(node, "variable", None)  # AccumulateGrad keeps its leaf, and so the leaf's .grad
        if leaf is not None:
            yield leaf
            if leaf.grad is not None:
                yield leaf.grad
        stack.extend(child for child, _ in getattr(node, "next_functions", ()))


def saved_by_node(root, seen: set[int], keep: list) -> Iterator[tuple[object, object]]:
    """(node, saved tensor) for each tensor saved in the nodes reachable from `root`'s grad_fn
    that are not in `seen`; `keep` holds the node wrappers so their ids stay unique."""
    for node, _slot, saved in saved_slots(getattr(root, "grad_fn", None), seen, keep):
        yield node, saved


def saved_slots(start, seen: set[int], keep: list) -> Iterator[tuple[object, str, object]]:
    """(node, slot, tensor) for each tensor saved in the nodes reachable from the node `start`
    and not in `seen`: built-in nodes' `_saved_*` slots, a custom Function's `saved_tensors`, and
    its ctx attributes (slot "ctx.<name>"). A slot backward already freed raises: skipped."""
    import torch

    custom = torch.autograd.function.BackwardCFunction
    stack = [start]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        for name in _saved_attributes(node):
            try:
                value = getattr(node, name)
            except RuntimeError:
                continue
            for item in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(item, torch.Tensor):
                    yield node, name, item
        if isinstance(node, custom):
            for name, value in list(dict.items(vars(node))):
                if isinstance(value, torch.Tensor) and isinstance(name, str):
                    yield node, f"ctx.{name}", value
        stack.extend(child for child, _ in getattr(node, "next_functions", ()))


def _saved_attributes(node) -> tuple[str, ...]:
    names = _saved_names.get(type(node))
    if names is None:
        names = tuple(n for n in dir(node) if n.startswith("_saved_") or n == "saved_tensors")
        _saved_names[type(node)] = names
    return names
