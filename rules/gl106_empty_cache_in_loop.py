from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, training_step_calls
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


class EmptyCacheInLoop(Rule):
    code = "GL106"
    name = "empty-cache-in-loop"
    severity = Severity.WARNING
    summary = "torch.cuda.empty_cache() every step: frees nothing still referenced, slows allocation"
    markers = ("empty_cache",)
    doc = """
## What it does
Flags `torch.cuda.empty_cache()` once per training step: in a loop or function that also calls
`optimizer.step()`, in a loop over a loader, dataset or epochs, in the forward or backward of
an autograd Function or an nn.Module's forward (every step runs them), or in a method a framework
runs every step (Lightning's `training_step`; a transformers `Trainer`'s `training_step` and
`compute_loss`, through the project's own base classes too). A call of a helper, of this file or
another module of the project, that empties the cache itself on every call counts as a call of
`empty_cache()` (the checked file still has to name `empty_cache`, as trl's helper is named: a
helper named otherwise in another module is not followed). Clearing the cache once
after training, once per epoch, every so many steps (`if step % 100 == 0:`), in a loop over
devices, in a loop whose iterations call a def of the file with a training loop of its own
(`for epoch in ...: train(epoch)`), or in an evaluation loop (over a loader, with grad off around
the call or the work in it, and no backward, `zero_grad()` or optimizer step in it) is not reported.

## Why is this bad?
`empty_cache()` returns the caching allocator's *unused* blocks to the driver. It frees no tensor
that is still referenced, so memory that climbs step after step keeps climbing; and every step
after it pays for fresh `cudaMalloc` calls. (On a CPU-only build it silently does nothing:
measured, torch 2.13.) What actually grows is held by something: a tensor kept on ctx, on a
module, in a list, or a loss summed without `.item()` (GL101-GL104), which `gradlint probe` names.

## Example
```python
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    torch.cuda.empty_cache()
```

## Use instead
```python
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
# find what holds the memory: gradlint probe train.py:step
```
"""
    VALID = (
        # Every 100 steps, and once per epoch: the cost is spread over many steps.
        """
import torch
for epoch in range(10):
    for step, (x, y) in enumerate(loader):
        criterion(model(x), y).backward()
        optimizer.step()
        if step % 100 == 0:
            torch.cuda.empty_cache()
    torch.cuda.empty_cache()
""",
        """
import torch
def evaluate(model, data):
    return model(data)
train()
torch.cuda.empty_cache()
for device in range(torch.cuda.device_count()):
    torch.cuda.empty_cache()
""",
        """
import torch
def train_epoch(model, loader, optimizer):
    optimizer.zero_grad()
    for x, y in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
""",
        # Evaluation and inference over a loader: nothing trains there, and grad is off.
        """
import torch as th
def evaluate(model, eval_loader):
    with th.no_grad():
        for x in eval_loader:
            th.cuda.empty_cache()
            model(x)
@th.no_grad()
def predict(model, dataloader):
    for x in dataloader:
        model(x)
        th.cuda.empty_cache()
for batch in test_loader:
    with th.no_grad():
        out = model(batch)
    th.cuda.empty_cache()
""",
        # Once per epoch: train() runs the steps, its own loop over the loader.
        """
import torch
def train(epoch):
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
for epoch in range(1, 1 + epochs):
    train(epoch)
    torch.cuda.empty_cache()
""",
        # A helper that empties the cache every 100 calls only, and a Trainer method run once per
        # evaluation: neither runs every step.
        """
import torch
from transformers import Trainer
def maybe_clear(step):
    if step % 100 == 0:
        torch.cuda.empty_cache()
class Distill(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        maybe_clear(self.state.global_step)
        return model(**inputs).loss
    def evaluate(self, *args, **kwargs):
        torch.cuda.empty_cache()
        return super().evaluate(*args, **kwargs)
""",
    )
    INVALID = (
        # Methods Lightning and transformers' Trainer run every step; a helper that empties the
        # cache on every call (trl's, which picks the available device) counts as the call.
        Invalid("""
import torch
import lightning.pytorch as L
from transformers import Trainer
def clear_cache(device=None):
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
class Regressor(L.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        torch.cuda.empty_cache()  # each batch
        return loss
class DistillTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        clear_cache()
        return (outputs.loss, outputs) if return_outputs else outputs.loss
""", ("torch.cuda.empty_cache()  # each batch", "clear_cache()")),
        Invalid("""
import torch as th
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    th.cuda.empty_cache()
""", ("th.cuda.empty_cache()",)),
        # A training loop that also scores a batch with grad off is still a training loop.
        Invalid("""
import torch
for x, y in train_loader:
    with torch.no_grad():
        ema_out = ema_model(x)
    loss = criterion(model(x), y) + kd(ema_out)
    loss.backward()
    optimizer.step()
    torch.cuda.empty_cache()
""", ("torch.cuda.empty_cache()",)),
        # A helper makes each step, the loop goes over the loader: once per step.
        Invalid("""
import torch
def train_step(x, y):
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    optimizer.step()
for x, y in train_loader:
    train_step(x, y)
    torch.cuda.empty_cache()
""", ("torch.cuda.empty_cache()",)),
        # A loss Function that clears the cache in its forward: once per batch.
        Invalid("""
import torch
class TransducerLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels):
        loss = compute(logits, labels)
        torch.cuda.empty_cache()
        return loss
""", ("torch.cuda.empty_cache()",)),
        Invalid("""
from torch import cuda
def train_step(batch):
    optimizer.zero_grad()
    model(batch).sum().backward()
    optimizer.step()
    cuda.empty_cache()
""", ("cuda.empty_cache()",)),
    )

    def precheck(self, tree) -> bool:
        names = prechecks.names_imported_as(tree, "empty_cache")
        return prechecks.call_in_training_step(tree, prechecks.calls_reaching(tree, names))

    def check(self, model: FileModel) -> Iterator[Hit]:
        for site in training_step_calls(model, "torch.cuda.empty_cache"):
            if site.periodic:  # every so many steps (`if step % 100 == 0`): the cost is spread thin
                continue
            through = model.runs_through(site.call, "torch.cuda.empty_cache")
            if through:  # a helper of the project: named, with its place
                yield Hit(site.call, f"{through} empties the cache every step: frees no live tensor, slows allocation")
                continue
            yield Hit(site.call, (
                "empty_cache() every step frees no live tensor and slows allocation; find the holder with "
                "`gradlint probe`"))
