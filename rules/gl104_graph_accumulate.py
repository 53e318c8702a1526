from __future__ import annotations

from typing import Iterator

from gradlint import graph_store_precheck
from gradlint.analysis import FileModel, graph_chained_totals
from gradlint.findings import Applicability, Severity
from gradlint.rule import FixPlan, Hit, Invalid, Replace, Rule


# PyG's pooling examples: the model returns its output and a ratio of sizes (no fix is offered).
_RATIO = """
import torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)
    def forward(self, x):
        out = self.lin(x)
        return out, out.size(0) / x.size(0)
model = Net().to("cpu")
def train(loader, optimizer):
    total_ratio, total_out = 0, 0
    for x in loader:
        out, ratio = model(x)
        loss = out.sum()
        loss.backward()
        optimizer.step()
        total_ratio += ratio
        total_out += out
"""

# DGL's hi-lander: a model method returns the loss and its parts as numbers; the totals sum the
# numbers (the loss itself summed is the leak). An RL rollout takes its log-probs under no_grad.
_METHOD_NUMBERS = """
import torch
from torch import nn
class Lander(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)
    def forward(self, x):
        return self.lin(x)
    def compute_loss(self, out):
        loss = out.pow(2).mean()
        return loss, loss.item(), out.mean().item()
    def act(self, x):
        out = self.lin(x)
        return out.argmax(-1), out.log_softmax(-1)
model = Lander().to("cpu")
def train(loader, optimizer, logprobs):
    total_val, total_mean, total_loss = 0, 0, 0
    for step, x in enumerate(loader):
        loss, val, mean = model.compute_loss(model(x))
        loss.backward()
        optimizer.step()
        total_val += val
        total_mean += mean
        total_loss += loss
        with torch.no_grad():
            action, logprob = model.act(x)
        logprobs[step] = logprob
        logprobs += logprob
"""


class GraphAccumulate(Rule):
    code = "GL104"
    name = "graph-accumulate"
    severity = Severity.ERROR
    summary = "a loss summed into a total that outlives the step, without .item()"
    # `torch.autograd.backward(` is a `.backward(`; `autograd.grad` alone is also `autograd.grad_mode`
    # and `gradcheck`, which train nothing.
    markers = (".backward(", "autograd.grad(", "training_step",
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
A meter of another module of the project (`meter.update(loss)`, whose `update` does
`self.sum += value * n`) chains onto the meter: reported at the call, with the line of that
method in the message, unless the meter is made afresh on every step. An attribute of a Module
forward's input is the caller's data for one call (PyG's `data.x = conv(data.x)`, a batch fresh
from the loader every step): not reported. A method of the model's class (of this file or another
module of the project, `model.compute_loss(out)`) is read there: the numbers it returns beside
the loss (`return loss, loss.item(), 0`) are numbers; one whose def cannot be read is taken by its
name, as a loss or output when it says so (`compute_loss`, `encode`). Nothing a call returns under
`torch.no_grad()` holds a graph, the items of a tuple neither. Only in a file whose code (not
a comment or docstring) shows training: a `.backward(` (also `torch.autograd.backward(`), an
`autograd.grad(`, a `training_step`, or a model, criterion or `loss_fn` call's result added
(`+`); elsewhere nothing is reported. Code under `torch.no_grad()`/`inference_mode()` makes no
graph: a block, a decorated method (also by a decorator of the project whose def names either:
yolov5's `@smart_inference_mode()`), a Lightning validation hook, and a method that only such code
of the file calls (a wrapper's helper, a model's `inference` called only from a
`@torch.no_grad()` function).

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
        # avalanche's training epoch: the total is made anew before it is added to, every step;
        # the `break` that may end an iteration first skips the addition too.
        """
import torch
class Strategy:
    def training_epoch(self):
        for self.mbatch in self.dataloader:
            if self._stop_training:
                break
            self.optimizer.zero_grad()
            self.loss = torch.zeros(())
            self.mb_output = self.model(self.mbatch)
            self.loss += self.criterion(self.mb_output)
            self.loss.backward()
            self.optimizer.step()
""",
        # spikingjelly's MNIST example: the firing-rate sum is made anew every batch on both
        # branches (with and without autocast) and summed over time steps within the batch.
        """
import torch
def train(net, encoder, loader, optimizer, T, scaler=None):
    for img, label in loader:
        optimizer.zero_grad()
        if scaler is not None:
            with torch.autocast("cuda"):
                out_fr = 0.0
                for t in range(T):
                    out_fr += net(encoder(img))
                loss = torch.nn.functional.mse_loss(out_fr / T, label)
            scaler.scale(loss).backward()
        else:
            out_fr = 0.0
            for t in range(T):
                out_fr += net(encoder(img))
            loss = torch.nn.functional.mse_loss(out_fr / T, label)
            loss.backward()
        optimizer.step()
""",
        # PyG: a forward rewrites its batch's features; the loader gives a new batch every step.
        """
import torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def forward(self, data):
        data.x = torch.relu(self.lin(data.x))
        data.x = data.x + self.lin(data.x)
        return data.x.sum()
def train(model, loader, optimizer):
    for data in loader:
        loss = model(data)
        loss.backward()
        optimizer.step()
""",
        # A helper that only the class's inference_mode method calls runs with grad off.
        """
import torch

class InferenceWrapper:
    def __init__(self, model):
        self.model = model

    def forward_all(self, batches):
        total = 0
        for b in batches:
            total += self.model(b).sum()
        return total

    @torch.inference_mode()
    def run(self, batches):
        return self.forward_all(batches)
""",
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
        # torchmetrics runs a Metric's update with grad off, and folds what `metric(x)` computed
        # with grad on into its state under no_grad: the state keeps no graph (measured).
        """
import torch
from torchmetrics import Metric
class Perplexity(Metric):
    def __init__(self):
        super().__init__()
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.loss_fn = torch.nn.CrossEntropyLoss()
    def update(self, preds, target):
        self.total += self.loss_fn(preds, target)
""",
        # A function named like a module but given the model (unsloth's patch_peft_model) prepares
        # the model and returns it: no module output, so the caches rebuilt at load time hold no graph.
        """
import torch
from .llama import FastLlamaModel
def fix_cache(model):
    for name, module in model.named_modules():
        emb = torch.outer(torch.arange(8.0), module.inv_freq)
        for i in range(len(module.cached)):
            if module.cached[i] is not None:
                module.cached[i] = (emb.cos() * module.scale).half()
    return model
def load(name):
    dispatch_model = FastLlamaModel
    model, tokenizer = dispatch_model.from_pretrained(name)
    model = dispatch_model.patch_peft_model(model, True)
    return fix_cache(model)
def train(model, loader, opt):
    for x in loader:
        model(x).sum().backward()
        opt.step()
""",
        # An auxiliary loss added into the loss of the output this forward's call just made
        # (peft's shadow tuner, MoE routers): a new object every call, chaining nothing across steps.
        """
import torch.nn as nn
class WithAux(nn.Module):
    def __init__(self, model, head):
        super().__init__()
        self.model = model
        self.head = head
    def forward(self, labels, **kwargs):
        output = self.model(**kwargs)
        if labels is not None:
            output.loss = output.loss + 0.1 * self.head(output.hidden_states[-1]).mean()
        return output
""",
    )
    INVALID = (
        # PyG's pooling examples: the model (`Net().to(device)`) returns its output and a ratio of
        # sizes; the ratio is a number, the output is not.
        Invalid(_RATIO, ("total_out += out",), fixed=_RATIO),
        Invalid(_METHOD_NUMBERS, ("total_loss += loss",),
                fixed=_METHOD_NUMBERS.replace("total_loss += loss\n", "total_loss += loss.item()\n")),
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
        for total in graph_chained_totals(model):
            instead = total.add_instead
            fix = None if instead is None else FixPlan(
                f"Add .{instead.method}()", Applicability.UNSAFE, (Replace(instead.node, instead.text),))
            if total.through is not None:  # the store is in another module: name it
                at = f" ({total.at})" if total.at else ""
                yield Hit(total.node, (
                    f"{total.through}() chains every step's graph onto {total.name}{at}; pass it .item() or .detach()"),
                    subject=total.holder)
                continue
            if total.origin is not None and total.reset is None:  # decided by another module: name it
                yield Hit(total.node, (
                    f"{total.name} chains every step's graph onto itself: {total.origin} gives a graph; "
                    "use .item()"), subject=total.holder, fix=fix)
                continue
            yield self._hit(total.node, total.name, total.holder, fix, total.reset)

    def _hit(self, node, name: str, subject: str, fix: FixPlan | None, reset) -> Hit:
        # Where the total lives is what made it a finding; the message names the total, and the doc
        # says which totals outlive the step and what was measured.
        advice = "use .item() (a total) or .detach() (state)"
        if reset is not None:  # bounded by the reset, but every step until then keeps its graph
            return Hit(node, (
                f"{name} chains each step's graph onto itself, reset only on some steps; {advice}"),
                Severity.WARNING, subject=subject, fix=fix)
        return Hit(node, f"{name} chains every step's graph onto itself, never freed; {advice}",
                   subject=subject, fix=fix)
