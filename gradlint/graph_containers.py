"""Graph-attached tensors kept in a list or dict that outlives the training step.

One question, `graph_kept_in_containers(model)`: each append, extend, insert or keyed store of a
graph-attached tensor, with grad enabled, into a container that outlives the step (created before
the training loop, a global, an attribute, a closure's), except where backward later needs what it
holds (an episode's log-probs) and a Module keeping its own activations (GL102's). A helper's own
store that makes a graph itself is given once, not again at each call of the helper. Each comes
with the `.item()`/`.detach()` rewrite of the stored value where that is still right code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from gradlint.file_model import FileModel
from gradlint.flow import ContainerAdd, KeptElsewhere
from gradlint.lifetimes import callers_data, forward_input, holder_name, later_use, outlives_step, runs_in_forward
from gradlint.rewrites import kept_value
from gradlint.trained_buffers import container_key


@dataclass(frozen=True)
class KeptInstead:
    """The stored value rewritten to keep no graph: `loss` -> `loss.item()`."""

    node: cst.BaseExpression  # the stored value
    text: str  # what replaces it
    method: str  # "item" or "detach"


@dataclass(frozen=True)
class ContainerKeep:
    """A graph-attached tensor kept in a container past its step."""

    node: cst.CSTNode  # the call or statement that stores
    container: str  # the container as written: `losses`, `self.history`
    holder: str  # the container as the runtime probe names it: `Trainer.history`
    method: str  # how it is stored: append, appendleft, extend, insert, setitem, setdefault, update, +=
    through: str | None  # the helper of the file that stores it, when the store is made inside one
    overwrites: bool  # one slot replaced every step: one step's graph is kept, not every step's
    # Unsafe (the container then holds floats or graph-free tensors): only where the value is a
    # proven tensor, nothing differentiates what the container holds later, nor can unseen code
    # (returned, passed on, the caller's), and the store is not in a Module's forward.
    keep_instead: KeptInstead | None
    at: str | None = None  # the def or method of another project module that stores it, for `through`
    origin: str | None = None  # another module's def or class the value's graph comes from (Val.origin)


def graph_kept_in_containers(model: FileModel) -> list[ContainerKeep]:
    """Walk by walk, in event order."""
    found = list(_keeps(model))
    own = {id(event.where.node) for event, _ in found if event.through is None}
    return [keep for event, keep in found if event.origin is None or id(event.origin) not in own]


def _keeps(model: FileModel) -> Iterator[tuple[ContainerAdd, ContainerKeep]]:
    for walk in model.walks:
        if walk.role.no_grad:
            continue
        for elsewhere in walk.of(KeptElsewhere):
            keep = _kept_elsewhere(walk, elsewhere)
            if keep is not None:
                yield elsewhere.stored, keep
        for event in walk.of(ContainerAdd):
            if event.where.no_grad or not event.value.holds_graph() or event.memo:
                continue  # a memo holds one value per key, never one per step
            if walk.removed_in_the_call(event):
                continue  # `d["h"] = h; ...; d.pop("h")`: the entry lives within the call
            if event.scope == "self-attribute" and runs_in_forward(model, walk):
                continue  # GL102 reports a module keeping its own activations
            if event.scope == "self-attribute" and event.container_name.count(".") == 1 \
                    and walk.made_afresh(*event.container_name.split("."), event):
                continue  # `self.outs = []` first in the method: it holds one call's values
            if event.scope in ("param", "attribute") and (forward_input(walk, event.container_name)
                                                          or callers_data(walk, event.container_name, event.where)):
                continue  # the caller's data for this call (`children.append(x)`, `g.ndata["h"] = h`)
            why = outlives_step(event.scope, event.container_name, event.where)
            if why is None:
                continue
            local = walk.function if event.scope == "local" and isinstance(walk.function, cst.FunctionDef) else None
            if event.container_name and container_key(event.container_name, local) in model.trained_buffers:
                continue  # an episode's log-probs, micro-batch losses: backward needs them, then they go
            # The helper's own line takes whatever each caller gives: the rewrite is for a person.
            instead = _keep_detached(model, walk, event) if event.through is None else None
            yield event, ContainerKeep(event.where.node, event.container_name,
                                       holder_name(walk, event.container_name), event.method, event.through,
                                       event.overwrites, instead, origin=event.value.origin)


def _kept_elsewhere(walk, event: KeptElsewhere) -> ContainerKeep | None:
    """A container another module's method or def adds to for this call: the receiver's
    (`self.items.append(x)` in a buffer's `add`: `buffer.items`), or that module's global."""
    stored = event.stored
    if not isinstance(stored, ContainerAdd) or event.where.no_grad or not stored.value.holds_graph() \
            or stored.container_name is None or stored.memo:
        return None
    head, _, rest = stored.container_name.partition(".")
    if stored.scope == "self-attribute" and event.receiver is not None and head == event.self_name:
        name = f"{event.receiver}.{rest}"
        why = outlives_step(event.receiver_scope or "local", event.receiver.split(".")[0], event.where)
    else:
        name, why = stored.container_name, outlives_step(stored.scope, stored.container_name, event.where)
    if why is None:
        return None
    return ContainerKeep(event.where.node, name, holder_name(walk, name), stored.method, event.callee,
                         stored.overwrites, None, event.at)


def _keep_detached(model: FileModel, walk, event: ContainerAdd) -> KeptInstead | None:
    node = event.where.node
    if isinstance(node, cst.Call) and event.method in ("append", "appendleft", "insert") and node.args \
            and node.args[-1].keyword is None and not node.args[-1].star:
        value = node.args[-1].value
    elif isinstance(node, cst.Assign) and event.method == "setitem":
        value = node.value
    else:
        return None
    if not event.value.proven_tensor or runs_in_forward(model, walk):
        return None
    use = later_use(model, walk, event.container_name, event.scope)
    # A value backward already ran on (its graph freed) no working code differentiates again: only
    # what needs a tensor later is unknown then, and `.detach()` keeps one.
    if use.differentiated or (use.unknown and not event.value.consumed):
        return None
    kept = kept_value(value, event.value, use.floats_do)
    if kept is None:
        return None
    text, method = kept
    return KeptInstead(value, text, method)
