from __future__ import annotations

from typing import Iterator

from gradlint import graph_store_precheck
from gradlint.file_model import FileModel, blocks_of
import libcst as cst

from gradlint.findings import Applicability, Severity
from gradlint.flow import AttributeStore, NameStore, may_leave_the_iteration
from gradlint.lifetimes import holder_name, later_use, outlives_step, runs_in_forward
from gradlint.prescan import descendants
from gradlint.rewrites import code, kept_value
from gradlint.trained_buffers import container_key
from gradlint.rule import FixPlan, Hit, Invalid, Replace, Rule


class GraphAccumulate(Rule):
    code = "GL104"
    name = "graph-accumulate"
    severity = Severity.ERROR
    summary = "a loss summed into a total that outlives the step, without .item()"
    markers = (".backward(", "autograd.grad", "autograd.backward", "training_step",
               *(("+", call) for call in ("model(", "net(", "criterion(", "loss_fn(")))
    fix_safety = "unsafe"
    doc = """
## What it does
Flags `total += loss` and `total = total + loss` (also into a slot: `epoch_loss[0] += loss`,
`self.stats["loss"] += loss`) where `loss` is graph-attached and `total` outlives the iteration: created before the training loop, a global, or an attribute. State
carried between steps and updated from itself (`out, hidden = model(x, hidden)` with no
`.detach()`) chains the graphs the same way and is reported too, unless the same pass detaches
it first (`hidden = hidden.detach()` before the call) or last (`hidden = repackage(hidden)` after
backward): then each step reads a graph-free state. A total reset on some steps of the same
step (`if micro % accum == 0: window = 0.0`, in the training loop's body or the step function) is
a warning: it holds every step's graph until the reset. A reset made on every step (a statement of
the step itself, not under an `if`, that no `continue` can skip) leaves one step's graph at most:
not reported. A reset per epoch (outside the loop around the update) or a first-step
initialisation (`if total is None:`, `if not hasattr(self, "total"):`) is none: still an error.

## Why is this bad?
Measured on torch 2.13: the tensor sum chains every step's graph onto `total`. The bytes hardly
move (the 0-d tensor is updated in place) but the autograd graph grows without bound: 804 graph
nodes after 100 steps of a small MLP, and `total.backward()` then fails with
`RuntimeError: Trying to backward through the graph a second time`.

Summing several losses inside one step (`loss = 0; for part in parts: loss += part`) is fine
and not reported, and so is a sum that backward() is called on (micro-batch losses summed for one
backward every few batches, then reset): that backward frees the graph.

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

## Fix safety
Unsafe: `total += loss` becomes `total += loss.item()` (the total is then a Python float) or
`total += loss.detach()` (a tensor without a graph). Offered for `t += v`, `t = t + v` and
`t = v + t` (other updates need a person to decide), and only where the result is still right
code; otherwise the finding stays, without a fix:
- `.item()` only when `v` is a tensor proven to hold one element (a full reduction, a torch loss
  with its default reduction, a name `backward()` ran on) and every later use of the total takes
  a number (not `total.item()`, not `torch.isnan(total)`); `.detach()` otherwise.
- Never when `v` is not proven a tensor: a module's output or what is read out of one
  (`stats["acc"]` may be a float, `stats["done"]` a bool), a tensor-or-None.
- Never when a backward the file shows reads the total (it is the loss: `self.loss += ...` then
  `self.loss.backward()`; an A2C entropy bonus), nor, unless backward already ran on `v`, when the
  total leaves what the file shows: returned (a helper summing micro-batch losses for its
  caller's backward looks the same), passed to another file's code, the caller's object, or an
  attribute of self that a method the file does not define may read (`self.backward()` of a base
  class in another file).
- Never in a Module's forward or a method it runs.
"""
    VALID = (
        # Truncated BPTT: the state is detached before the call that reads it, inside a branch
        # (the first chunk starts without one): quiet there as it is outside a branch.
        """
def train_chunks(model, chunks, optimizer, loss_fn):
    hidden = None
    for x_t, y_t in chunks:
        optimizer.zero_grad()
        if hidden is None:
            y_pred, hidden = model(x_t)
        else:
            hidden = _detach_hidden(hidden)
            y_pred, hidden = model(x_t, hidden)
        loss_fn(y_pred, y_t).backward()
        optimizer.step()
""",
        # Reset on every step: it never holds more than the step's own graph.
        """
import torch
TOTAL = 0.0
def step(model, x, y):
    global TOTAL
    loss = model(x).sub(y).pow(2).mean()
    loss.backward()
    TOTAL = TOTAL + loss
    print(TOTAL.item())
    TOTAL = 0.0
""",
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
        """
def train(model, loader, optimizer, accum_steps):
    accum_loss = 0.0
    for i, (x, y) in enumerate(loader):
        accum_loss = accum_loss + criterion(model(x), y) / accum_steps
        if (i + 1) % accum_steps == 0:
            accum_loss.backward()
            optimizer.step()
            accum_loss = 0.0
""",
        # State detached first in each pass, last in each pass, or by a helper: nothing is chained.
        """
def train(rnn, head, optimizer, loader, hidden):
    for x, y in loader:
        hidden = hidden.detach()
        out, hidden = rnn(x, hidden)
        head(out).sub(y).pow(2).mean().backward()
        optimizer.step()
""",
        """
def repackage(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage(v) for v in h)

def train(model, optimizer, loader):
    hidden = model.init_hidden(4)
    for x, y in loader:
        out, hidden = model(x, hidden)
        out.sub(y).pow(2).mean().backward()
        optimizer.step()
        hidden = repackage(hidden)
""",
        """
class Stateful:
    def step(self, x, y):
        out, self.h = self.lstm(x, self.h)
        out.sub(y).pow(2).mean().backward()
        self.h = tuple(h.detach() for h in self.h)
""",
    )
    INVALID = (
        # A reset a `continue` can skip does not run every step.
        Invalid("""
import torch
def fit(model, loader, opt):
    total = 0.0
    for x, y in loader:
        loss = model(x).sub(y).pow(2).mean()
        loss.backward()
        opt.step()
        total = total + loss
        if x is None:
            continue
        total = 0.0
""", ("total = total + loss",), fixed="""
import torch
def fit(model, loader, opt):
    total = 0.0
    for x, y in loader:
        loss = model(x).sub(y).pow(2).mean()
        loss.backward()
        opt.step()
        total = total + loss.item()
        if x is None:
            continue
        total = 0.0
"""),
        # Reset every few steps: bounded, still every step's graph until the reset (a warning).
        Invalid("""
import torch
WINDOW = 0.0
def step(model, x, y, i):
    global WINDOW
    loss = model(x).sub(y).pow(2).mean()
    loss.backward()
    WINDOW = WINDOW + loss
    if i % 4 == 0:
        print(WINDOW.item())
        WINDOW = 0.0
""", ("WINDOW = WINDOW + loss",), fixed="""
import torch
WINDOW = 0.0
def step(model, x, y, i):
    global WINDOW
    loss = model(x).sub(y).pow(2).mean()
    loss.backward()
    WINDOW = WINDOW + loss.detach()
    if i % 4 == 0:
        print(WINDOW.item())
        WINDOW = 0.0
"""),
        Invalid("""
class Meter:
    def __init__(self):
        self.total = 0.0
    def record(self, value):
        self.total = self.total + value

meter = Meter()

def train_step(model, x):
    loss = model(x).sum()
    loss.backward()
    meter.record(loss)
""", ("self.total = self.total + value",)),
        Invalid("""
import torch
def train(model, loader, opt, n):
    per_sample_loss = torch.zeros(n)
    for idx, x in loader:
        losses = model(x).pow(2).mean(dim=1)
        per_sample_loss[idx] = losses
        opt.zero_grad()
        losses.mean().backward()
        opt.step()

def evaluate(model, iterator, criterion):
    total = 0
    for src, trg in iterator:
        total += criterion(model(src), trg)
    return total / len(iterator)
""", ("per_sample_loss[idx] = losses", "total += criterion(model(src), trg)")),
        Invalid("""
import torch
from torch import nn
class Regressor(nn.Module):
    def __init__(self, steps):
        super().__init__()
        self.head = nn.Linear(8, 1)
        self.register_buffer("losses", torch.zeros(steps))
    def train_step(self, i, x, y):
        loss = self.head(x).sub(y).pow(2).mean()
        loss.backward()
        self.losses[i] = loss
""", ("self.losses[i] = loss",)),
        Invalid("""
total_loss = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total_loss += loss
""", ("total_loss += loss",), fixed="""
total_loss = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total_loss += loss.item()
"""),
        Invalid("""
RUNNING = 0
class Trainer:
    def __init__(self, model, criterion):
        self.model, self.criterion = model, criterion
        self.epoch_loss = 0.0
    def train_step(self, x, y):
        global RUNNING
        loss = self.criterion(self.model(x), y)
        loss.backward()
        self.epoch_loss = self.epoch_loss + loss
        RUNNING += loss
""", ("self.epoch_loss = self.epoch_loss + loss", "RUNNING += loss"), fixed="""
RUNNING = 0
class Trainer:
    def __init__(self, model, criterion):
        self.model, self.criterion = model, criterion
        self.epoch_loss = 0.0
    def train_step(self, x, y):
        global RUNNING
        loss = self.criterion(self.model(x), y)
        loss.backward()
        self.epoch_loss = self.epoch_loss + loss.item()
        RUNNING += loss.item()
"""),
        # `total_nll.item()` later: the total stays a tensor (`.detach()`); a number is returned.
        Invalid("""
import torch.nn.functional as F
def evaluate(model, loader):
    total_nll = 0.0
    for x, y in loader:
        total_nll = total_nll + F.nll_loss(model(x), y)
    return total_nll.item() / len(loader)
""", ("total_nll = total_nll + F.nll_loss(model(x), y)",), fixed="""
import torch.nn.functional as F
def evaluate(model, loader):
    total_nll = 0.0
    for x, y in loader:
        total_nll = total_nll + F.nll_loss(model(x), y).detach()
    return total_nll.item() / len(loader)
"""),
        Invalid("""
import torch
def train_epoch(model, loader, optimizer):
    epoch_loss = torch.zeros(2)
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        epoch_loss[0] += loss
        epoch_loss[1] += len(x)
    print(epoch_loss[0].item() / epoch_loss[1].item())
""", ("epoch_loss[0] += loss",), fixed="""
import torch
def train_epoch(model, loader, optimizer):
    epoch_loss = torch.zeros(2)
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        epoch_loss[0] += loss.detach()
        epoch_loss[1] += len(x)
    print(epoch_loss[0].item() / epoch_loss[1].item())
"""),
        # A `continue` between the call and the detach, or an unknown helper last: the graph rides on.
        Invalid("""
def train(model, loader, opt, crit):
    hidden = None
    for x, y in loader:
        out, hidden = model(x, hidden)
        loss = crit(out, y)
        if loss.item() > 1e3:
            continue
        loss.backward()
        opt.step()
        hidden = hidden.detach()

def train_carried(model, loader, opt, crit):
    state = None
    for x, y in loader:
        out, state = model(x, state)
        crit(out, y).backward()
        opt.step()
        state = carry_over(state)
""", ("out, hidden = model(x, hidden)", "out, state = model(x, state)")),
        Invalid("""
def train(lstm, optimizer, loader, h, c):
    for x, y in loader:
        out, (h, c) = lstm(x, (h, c))
        out.sub(y).pow(2).mean().backward(retain_graph=True)
        optimizer.step()
""", ("out, (h, c) = lstm(x, (h, c))",)),
    )

    def precheck(self, tree) -> bool:
        return graph_store_precheck.may_store_across_steps(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for walk in model.walks:
            if walk.role.no_grad:
                continue
            # A sum backward() is called on is one graph on purpose (accumulating micro-batch
            # losses for one backward): that backward frees it, and a second one would raise.
            backward_roots = model.prescan(walk.function).backward_roots
            for event in walk.events:
                if isinstance(event, NameStore) and event.chained and not event.where.no_grad \
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
                        fix = _add_detached(model, walk, event, event.name,
                                            "local" if event.scope == "param" else event.scope)
                        yield self._hit(event.where.node, event.name, why, event.name, fix, reset)
                elif isinstance(event, AttributeStore) and not event.where.no_grad and event.value.holds_graph() \
                        and (event.augmented or f"{event.owner_name}.{event.attribute}" in event.value.reads):
                    if event.owner_name == walk.role.self_name and (walk.role.kind == "module_forward" or (
                            walk.role.kind == "module_method" and isinstance(walk.function, cst.FunctionDef)
                            and model.runs_in_forward(walk.function))):
                        continue  # GL102 owns a module's own attributes, in forward and what it calls
                    if walk.made_afresh(event.owner_name, event.attribute, event):
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
                    fix = _add_detached(model, walk, event, name, scope)
                    yield self._hit(event.node, name, "an attribute", holder_name(walk, name), fix, reset)

    def _hit(self, node, name: str, why: str, subject: str, fix: FixPlan | None, reset: cst.CSTNode | None) -> Hit:
        # `why` (where the total lives) is what made it a finding; the message names the total, and
        # the doc says which totals outlive the step and what was measured.
        advice = "use .item() (a total) or .detach() (state)"
        if reset is not None:  # bounded by the reset, but every step until then keeps its graph
            return Hit(node, (
                f"{name} chains each step's graph onto itself, reset only on some steps; {advice}"),
                Severity.WARNING, subject=subject, fix=fix)
        return Hit(node, f"{name} chains every step's graph onto itself, never freed; {advice}",
                   subject=subject, fix=fix)


def _trained(model: FileModel, walk, name: str) -> bool:
    """A rollout's running total that the update's loss is computed from (A2C's entropy bonus):
    its graph is needed by that backward, then freed."""
    return isinstance(walk.function, cst.FunctionDef) and container_key(name, walk.function) in model.trained_in(walk.function)


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
        if not tests and any(isinstance(s, cst.SimpleStatementLine) and other.where.node in s.body for s in body) \
                and not any(may_leave_the_iteration(s) for s in body):
            return other.where.node, True
        found = found or other.where.node
    return found, False


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
                  scope: str) -> FixPlan | None:
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
    return FixPlan(f"Add .{method}()", Applicability.UNSAFE, (Replace(value, text),))
