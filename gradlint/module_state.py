"""What an nn.Module's forward keeps past the step: graph-attached tensors on self or in globals.

One question, `graph_kept_by_module_forward(model)`: each store, made with grad enabled by a
Module's forward (or a method forward calls), of a graph-attached tensor onto `self`, into a
container on `self`, or into a global, with whether each step's graph chains onto the last.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradlint.file_model import FileModel
from gradlint.flow import AttributeStore, ContainerAdd, NameStore

SELF_ATTRIBUTE = "self attribute"  # self.h = out
SELF_CONTAINER = "self container"  # self.history.append(out)
GLOBAL = "global"  # global LAST; LAST = out


@dataclass(frozen=True)
class KeptGraph:
    """A graph-attached tensor a Module's forward keeps where the next step still sees it."""

    node: cst.CSTNode  # the store (the target, for an attribute store)
    where: str  # SELF_ATTRIBUTE, SELF_CONTAINER or GLOBAL
    shown: str  # the holder as written: `self.h`, `self.history`, `LAST`
    holder: str  # the holder as the runtime probe names it: `Encoder.h`, `Encoder.history`, `LAST`
    # Each step's graph chains onto the last (`self.h = self.h + x`, `self.h += x`): memory grows
    # every step. Always true for a container add.
    chained: bool
    # What the finding rests on in another file of the project, as a clause: `Net is an
    # nn.Module by BaseModel (models/base.py:4)`, `MLP (layers.py:4) gives a graph`.
    rests_on: str | None = None


def graph_kept_by_module_forward(model: FileModel) -> list[KeptGraph]:
    """Walk by walk (Module forwards and the methods they run), in event order; stores under
    torch.no_grad() and walks of a no_grad method are left out."""
    found = []
    reset = _reset_outside_init(model)
    for walk in model.walks:
        role = walk.role
        if role.no_grad or not (role.kind == "module_forward" or (
                role.kind == "module_method" and isinstance(walk.function, cst.FunctionDef)
                and model.runs_in_forward(walk.function))):
            continue
        through = model.module_through(role.owner_class)
        module_by = f"{role.owner_class} is an nn.Module by {through}" if through else None

        def rests_on(value) -> str | None:
            return module_by or (f"{value.origin} gives a graph" if value.origin else None)

        for event in walk.events:
            if getattr(event, "where", None) is None or event.where.no_grad:
                continue
            if isinstance(event, AttributeStore) and event.owner_name == role.self_name \
                    and event.value.holds_graph() \
                    and not (event.memo and f"{event.owner_name}.{event.attribute}" in walk.memos_read
                             and (role.owner_class, event.attribute) not in reset):
                # (a cache set once for good and computed with afterwards, `if self.c is None: self.c
                # = f(x)` then `x = self.c`: a graph in it would fail the next step's backward,
                # measured; one another method sets to None again is per-round state, reported)
                target = f"{role.self_name}.{event.attribute}"
                found.append(KeptGraph(event.node, SELF_ATTRIBUTE, target, f"{role.owner_class}.{event.attribute}",
                                       event.augmented or target in event.value.reads, rests_on(event.value)))
            elif isinstance(event, ContainerAdd) and event.scope == "self-attribute" and event.value.holds_graph() \
                    and not event.memo and not walk.removed_in_the_call(event):
                # a memo (`if k not in self.cache`) keeps one value per key; DGL's
                # `self.g.ndata["x"] = h ... self.g.ndata.pop("x")` keeps nothing past the call; one
                # fixed slot of a list or dict (`self.g.ndata["z"] = z`, `self.buf[0] = h`) is replaced
                # every forward: one step's graph, as an attribute keeps it (a tensor written in place
                # at a fixed index chains instead, as the doc's CopySlices measure says)
                slot = event.overwrites and event.not_tensor
                holder = f"{role.owner_class}.{event.container_name.split('.', 1)[-1]}"
                found.append(KeptGraph(event.where.node, SELF_ATTRIBUTE if slot else SELF_CONTAINER,
                                       event.container_name, holder,
                                       not slot or event.container_name in event.value.reads, rests_on(event.value)))
            elif isinstance(event, NameStore) and event.scope == "global" and event.value.holds_graph():
                found.append(KeptGraph(event.where.node, GLOBAL, event.name, event.name, event.chained,
                                       rests_on(event.value)))
    return found


def _reset_outside_init(model: FileModel) -> set[tuple[str | None, str]]:
    """(class, attribute) that a method other than __init__ sets to None (`reset()`,
    `post_parameter_update()`): a cache made again every round."""
    found = set()
    for walk in model.walks:
        role = walk.role
        if role.self_name is None or (isinstance(walk.function, cst.FunctionDef) and walk.function.name.value == "__init__"):
            continue
        for event in walk.of(AttributeStore):
            if event.owner_name == role.self_name and event.value.none:
                found.add((role.owner_class, event.attribute))
    return found
