from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import FileModel, retained_last_backwards
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


class RetainGraphInLoop(Rule):
    code = "GL105"
    name = "retain-graph-in-loop"
    severity = Severity.WARNING
    summary = "the last backward of a training step keeps its graph (retain_graph=True)"
    markers = ("retain_graph",)
    doc = """
## What it does
Flags `backward(retain_graph=True)` (and `torch.autograd.backward`/`grad` with it) once per
training step (in a loop or function that also calls `optimizer.step()`, or in a loop over a
loader, dataset or epochs) when it is the step's last backward: no later backward in the same
loop body or function frees the graph (a call given `retain_graph=`, whatever its name, runs one:
tianshou's `critic_optim.step(loss, retain_graph=True)`). A loop over a model's outputs inside one step is not a
training loop, nor is a saliency map or Grad-CAM that clears the model's gradients
(`model.zero_grad()`) before its backward: it steps no optimizer.

## Why is this bad?
Measured on torch 2.13: with `loss.backward(retain_graph=True)` every step, one whole graph's saved
tensors (812548 B in the reference loop) stay alive between steps, where normally none do. It is
usually a symptom: a hidden state carried from step to step is not detached, and retain_graph
silenced the "Trying to backward through the graph a second time" error it caused.

`loss_d.backward(retain_graph=True)` followed by `loss_g.backward()` in the same step is fine: the
second backward frees the shared graph.

## Example
```python
for x, y in loader:
    out, hidden = rnn(x, hidden)
    loss = criterion(out, y)
    loss.backward(retain_graph=True)
    optimizer.step()
```

## Use instead
```python
for x, y in loader:
    hidden = hidden.detach()
    out, hidden = rnn(x, hidden)
    loss = criterion(out, y)
    loss.backward()
    optimizer.step()
```
"""
    VALID = (
        # tianshou's CQL: the optimizer wrapper given `retain_graph=` runs the later backwards.
        """
def learn(self, batches):
    for batch in batches:
        alpha_loss = self.alpha_loss(batch)
        self.alpha_optim.zero_grad()
        alpha_loss.backward(retain_graph=True)
        self.alpha_optim.step()
        self.critic_optim.step(self.critic_loss(batch) + alpha_loss, retain_graph=True)
        self.critic2_optim.step(self.critic2_loss(batch))
""",
        # Per-task gradient norms in a loop over the step's losses, then the step's backward.
        """
import torch
for x, targets in loader:
    losses = [crit(head(model(x)), t) for head, t in zip(heads, targets)]
    norms = []
    for l in losses:
        g, = torch.autograd.grad(l, shared, retain_graph=True)
        norms.append(g.norm().item())
    optimizer.zero_grad()
    sum(losses).backward()
    optimizer.step()
""",
        """
for x, y in loader:
    loss_d = d_loss(x)
    loss_g = g_loss(x)
    loss_d.backward(retain_graph=True)
    loss_g.backward()
    opt.step()
""",
        """
def compute_hessian_row(loss, params):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return grads
loss.backward(retain_graph=True)
""",
        # Grad-CAM: zero_grad, then a backward that keeps the graph for the next class's map.
        """
def class_activation_map(model, image, target):
    model.zero_grad()
    logits = model(image)
    logits[:, target].sum().backward(retain_graph=True)
    return model.features.grad
""",
        """
def grads_of_each_output(outs, inputs):
    for out in outs:
        out.sum().backward(retain_graph=True)
    return [x.grad for x in inputs]
""",
    )
    INVALID = (
        Invalid("""
for x, y in loader:
    out, hidden = rnn(x, hidden)
    loss = criterion(out, y)
    loss.backward(retain_graph=True)
    optimizer.step()
""", ("loss.backward(retain_graph=True)",)),
        Invalid("""
import torch
def train_step(model, batch, optimizer):
    optimizer.zero_grad()
    loss = model(batch).mean()
    torch.autograd.backward(loss, retain_graph=True)
    optimizer.step()
""", ("torch.autograd.backward(loss, retain_graph=True)",)),
    )

    def precheck(self, tree) -> bool:
        return prechecks.keyword_true_in_training_step(tree, "retain_graph")

    def check(self, model: FileModel) -> Iterator[Hit]:
        for backward in retained_last_backwards(model):
            yield Hit(backward.node, (
                "retain_graph=True on the step's last backward keeps its graph into the next step; "
                "detach the carried state instead"),
                subject=backward.carried_state)
