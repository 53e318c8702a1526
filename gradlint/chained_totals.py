"""Totals and carried state that chain each step's graph onto the last.

One question, `graph_chained_totals(model)`: each `total += loss`, `total = total + loss` (into a
name, a slot, an attribute) and each state updated from itself (`h = f(x, h)`) that keeps a
graph-attached value, with grad enabled, in a holder that outlives the step: created before the
training loop, a global, an attribute. Left out: a sum backward() is called on, a buffer a
backward is run through and emptied, a rollout total the update's loss uses, a holder reset on
every step, a Module's own attributes (GL102's), and an attribute made afresh in every call. Each
comes with the reset that bounds it on some steps, if any, and the `.item()`/`.detach()` rewrite
of the added value where that is still right code.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradlint.file_model import FileModel
from gradlint.flow import AttributeStore, KeptElsewhere, NameStore, may_leave_the_iteration
from gradlint.graph_containers import KeptInstead
from gradlint.lifetimes import forward_input, holder_name, later_use, outlives_step, runs_in_forward
from gradlint.prescan import blocks_of, descendants
from gradlint.rewrites import code, kept_value
from gradlint.trained_buffers import container_key


@dataclass(frozen=True)
class ChainedTotal:
    """A holder that chains every step's graph onto itself."""

    node: cst.CSTNode  # the update
    name: str  # the holder as written: `total`, `self.loss_sum`
    lives: str  # where the holder lives, which makes it outlive the step
    holder: str  # the holder as the runtime probe names it: `Trainer.loss_sum`
    # A store of a graph-free value into the same holder on some steps (`if i % k == 0: total = 0.0`):
    # memory is bounded by it, but every step until then keeps its graph.
    reset: cst.CSTNode | None
    # Unsafe (the total becomes a float or a graph-free tensor): only `t += v` and `t = t + v`, with
    # `v` a proven tensor, nothing differentiating the total later, nor unseen code (returned,
    # passed on, the caller's), and not in a Module's forward.
    add_instead: KeptInstead | None
    # Made inside another project module's def or method this call runs (`meter.update(loss)`):
    # the call as written, and where that def is (`pkg/utils/meters.py:8`).
    through: str | None = None
    at: str | None = None
    origin: str | None = None  # another module's def or class the added value's graph comes from


def graph_chained_totals(model: FileModel) -> list[ChainedTotal]:
    """Walk by walk, in event order."""
    found = []
    for walk in model.walks:
        if walk.role.no_grad:
            continue
        # A sum backward() is called on is one graph on purpose (accumulating micro-batch
        # losses for one backward): that backward frees it, and a second one would raise.
        backward_roots = model.prescan(walk.function).backward_roots
        for event in walk.events:
            if isinstance(event, KeptElsewhere):
                total = _chained_elsewhere(walk, event)
                if total is not None:
                    found.append(total)
            elif isinstance(event, NameStore) and event.chained and not event.where.no_grad \
                    and event.value.holds_graph() and event.name not in backward_roots \
                    and not _trained_buffer(model, walk, event) \
                    and not (any(loop.is_rollout for loop in event.where.loops) and _trained(model, walk, event.name)):
                # Rebinding a parameter never reaches the caller: from here on it is a local,
                # carried from one step to the next only by a training loop in this function.
                why = outlives_step("local" if event.scope == "param" else event.scope, event.name, event.where)
                if why is not None:
                    reset, every_step = _reset_in_step(
                        walk, event, lambda e: isinstance(e, NameStore) and e.name == event.name
                        and not e.chained and not e.augmented and event.name not in e.value.reads, event.name)
                    if every_step:
                        continue  # `total = 0.0` on every step: it holds one step's graph at most
                    instead = _add_detached(model, walk, event, event.name,
                                            "local" if event.scope == "param" else event.scope)
                    found.append(ChainedTotal(event.where.node, event.name, why, event.name, reset, instead,
                                              origin=event.value.origin))
            elif isinstance(event, AttributeStore) and not event.where.no_grad and event.value.holds_graph() \
                    and (event.augmented or f"{event.owner_name}.{event.attribute}" in event.value.reads):
                if event.owner_name == walk.role.self_name and (walk.role.kind == "module_forward" or (
                        walk.role.kind == "module_method" and isinstance(walk.function, cst.FunctionDef)
                        and model.runs_in_forward(walk.function))):
                    continue  # GL102 owns a module's own attributes, in forward and what it calls
                if forward_input(walk, event.owner_name):
                    continue  # `data.x = conv(data.x)`: the caller's batch, fresh every step
                if walk.made_afresh(event.owner_name, event.attribute, event) \
                        or walk.owner_made_afresh(event.owner_name, event):
                    continue  # rebound from scratch earlier in every call: no chain across calls
                if event.owner_name == walk.role.self_name and walk.role.kind == "module_method" \
                        and not walk.for_caller and isinstance(walk.function, cst.FunctionDef) \
                        and model.called_by_its_class(walk.function):
                    continue  # a helper of another method: its caller decides what self holds
                name = f"{event.owner_name}.{event.attribute}"
                reset, every_step = _reset_in_step(
                    walk, event, lambda e: isinstance(e, AttributeStore) and not e.augmented
                    and (e.owner_name, e.attribute) == (event.owner_name, event.attribute) and name not in e.value.reads,
                    name)
                if every_step:
                    continue
                scope = "self-attribute" if event.owner_name.split(".")[0] == walk.role.self_name else "attribute"
                instead = _add_detached(model, walk, event, name, scope)
                found.append(ChainedTotal(event.node, name, "an attribute", holder_name(walk, name), reset, instead,
                                          origin=event.value.origin))
    return found


def _chained_elsewhere(walk, event: KeptElsewhere) -> ChainedTotal | None:
    """A total another module's method or def chains for this call: on the receiver's attribute
    (`self.sum += value` in the meter's update: `meter.sum`), or on that module's global."""
    stored = event.stored
    if event.where.no_grad or not stored.value.holds_graph():
        return None
    if isinstance(stored, AttributeStore):
        if not (stored.augmented or f"{stored.owner_name}.{stored.attribute}" in stored.value.reads):
            return None
        head, _, rest = stored.owner_name.partition(".")
        if event.receiver is not None and head == event.self_name:
            name = ".".join(p for p in (event.receiver, rest, stored.attribute) if p)
            # The receiver's own attribute lives as long as the receiver: one made afresh on
            # every step (`meter = Meter()` inside the loop) holds one step's graph.
            why = outlives_step(event.receiver_scope or "local", event.receiver.split(".")[0], event.where)
        else:
            name, why = f"{stored.owner_name}.{stored.attribute}", "an attribute"
    elif isinstance(stored, NameStore) and stored.chained and stored.scope in ("global", "closure"):
        name, why = stored.name, outlives_step(stored.scope, stored.name, event.where)
    else:
        return None
    if why is None:
        return None
    return ChainedTotal(event.where.node, name, why, holder_name(walk, name), None, None, event.callee, event.at)


def _trained(model: FileModel, walk, name: str) -> bool:
    """A rollout's running total that the update's loss is computed from (A2C's entropy bonus, in
    a def or a script's top level): its graph is needed by that backward, then freed."""
    return container_key(name, walk.function) in model.trained_in(walk.function)


def _trained_buffer(model: FileModel, walk, event: NameStore) -> bool:
    """`window = torch.stack(window)` for a list backward is run through and then emptied (a
    truncated-BPTT window, micro-batch outputs): the graphs are needed, then they go."""
    local = walk.function if event.scope in ("local", "param") and isinstance(walk.function, cst.FunctionDef) else None
    return container_key(event.name, local) in model.trained_buffers


def _reset_in_step(walk, event, is_reset, target: str) -> tuple[cst.CSTNode | None, bool]:
    """A store of a graph-free value into the same target within the same step (the body of the
    innermost loop around the update, or the step function when it is in no loop): `if micro %
    accum == 0: window = 0.0`; and whether it is made on every step (a statement of that body, not
    under an `if`). A reset outside that loop (per epoch) is none, nor is a first-step
    initialisation (`if total is None:`, `if not hasattr(self, "total"):`)."""
    inner = event.where.loops[-1].node if event.where.loops else None
    if inner is None and not isinstance(walk.function, cst.FunctionDef):
        return None, False
    body = inner.body.body if inner is not None else walk.function.body.body
    found = None
    for other in walk.events:
        if other is event or not is_reset(other) or other.value.holds_graph() or _reads_target(other):
            continue
        if inner is not None and not any(loop.node is inner for loop in other.where.loops):
            continue
        tests = _tests_around(body, other.where.node)
        if tests is None or any(_initialises(test, target) for test in tests):
            continue
        reset_at = next((i for i, s in enumerate(body)
                         if isinstance(s, cst.SimpleStatementLine) and other.where.node in s.body), None)
        # A reset before the update (`self.loss = self._make_empty_loss()` then `self.loss +=
        # ...`, avalanche) runs on every path that reaches it, whatever ends an iteration early;
        # one after it is skipped by a `continue` in between.
        if not tests and reset_at is not None and (
                reset_at < _index_of(body, event.where.node) or not any(may_leave_the_iteration(s) for s in body)):
            return other.where.node, True
        found = found or other.where.node
    return found, False


def _index_of(statements, node: cst.CSTNode) -> int:
    """The index of the statement that holds `node` (len(statements) when none does)."""
    for index, statement in enumerate(statements):
        if any(inner is node for inner in descendants(statement)):
            return index
    return len(statements)


def _tests_around(statements, node, tests: tuple = ()) -> list | None:
    """The `if` tests `node` sits under within these statements (None: not in them)."""
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            if node in statement.body:
                return list(tests)
        elif isinstance(statement, cst.If):
            found = _tests_around(statement.body.body, node, (*tests, statement.test))
            if found is None and statement.orelse is not None:
                orelse = statement.orelse
                branch = [orelse] if isinstance(orelse, cst.If) else orelse.body.body
                found = _tests_around(branch, node, (*tests, statement.test))
            if found is not None:
                return found
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            for block in blocks_of(statement):
                found = _tests_around(block, node, tests)
                if found is not None:
                    return found
    return None


def _initialises(test: cst.BaseExpression, target: str) -> bool:
    """A first-step guard on the target itself: `total is None`, `not hasattr(self, "total")`,
    `not total` (or one side of an `or` of them). `step % k == 0 and total is not None` and
    `total.item() > 100` are periodic resets, not guards."""
    if isinstance(test, cst.BooleanOperation):
        return isinstance(test.operator, cst.Or) and (_initialises(test.left, target) or _initialises(test.right, target))
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return code(test.expression).strip() == target or _is_hasattr(test.expression, target)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        comparison = test.comparisons[0]
        return code(test.left).strip() == target and isinstance(comparison.operator, (cst.Is, cst.Equal)) \
            and isinstance(comparison.comparator, cst.Name) and comparison.comparator.value == "None"
    return _is_hasattr(test, target)


def _is_hasattr(expr: cst.BaseExpression, target: str) -> bool:
    owner, _, attribute = target.rpartition(".")
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "hasattr" \
        and len(expr.args) == 2 and code(expr.args[0].value).strip() == owner \
        and isinstance(expr.args[1].value, cst.SimpleString) and expr.args[1].value.evaluated_value == attribute


def _reads_target(store) -> bool:
    """`hidden = hidden.detach()`, `state = carry_over(state)`: the state carried on, not a reset."""
    node = store.where.node
    if not isinstance(node, cst.Assign):
        return True
    target = code(node.targets[0].target).strip()
    head = target.split(".")[0].split("[")[0]
    names = {n.value for n in descendants(node.value) if isinstance(n, cst.Name)}
    return head in names and (target == head or target in code(node.value))


def _add_detached(model: FileModel, walk, event: NameStore | AttributeStore, holder: str,
                  scope: str) -> KeptInstead | None:
    """Unsafe: the total becomes a Python float (`.item()`) or a tensor without a graph
    (`.detach()`). Only `t += v` and `t = t + v` / `t = v + t`: other updates (`h = h * a + x`)
    need a person to decide; and only where the result is still right code: `v` proven a tensor
    (one element for `.item()`, and every later use of the total takes a number), nothing in the
    file differentiates the total later, nor can code the file does not show (it is returned,
    passed on, the caller's), and the update is not in a Module's forward."""
    statement = event.where.node
    kept_val = event.value if event.augmented else event.operand
    if kept_val is None or not kept_val.proven_tensor or runs_in_forward(model, walk):
        return None
    if isinstance(statement, cst.AugAssign) and isinstance(statement.operator, cst.AddAssign):
        value = statement.value
    elif isinstance(statement, cst.Assign) and len(statement.targets) == 1 \
            and isinstance(statement.value, cst.BinaryOperation) and isinstance(statement.value.operator, cst.Add):
        target = code(statement.targets[0].target).strip()
        left, right = statement.value.left, statement.value.right
        if code(left).strip() == target:
            value = right
        elif code(right).strip() == target:
            value = left
        else:
            return None
    else:
        return None
    use = later_use(model, walk, holder, scope)
    # A value backward already ran on (its graph freed) no working code differentiates again: only
    # what needs a tensor later is unknown then, and `.detach()` keeps one.
    if use.differentiated or (use.unknown and not kept_val.consumed):
        return None
    kept = kept_value(value, kept_val, use.floats_do)
    if kept is None:
        return None
    text, method = kept
    return KeptInstead(value, text, method)
