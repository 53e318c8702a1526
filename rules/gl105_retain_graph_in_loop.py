from __future__ import annotations

import ast
from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint.call_sites import CallSite, in_training_step, is_true, keyword, method_name, step_loop
from gradlint.file_model import FileModel
from gradlint.findings import Severity
from gradlint.names import dotted
from gradlint.prescan import descendants
from gradlint.rule import Hit, Invalid, Rule

_GRAD_CALLS = ("torch.autograd.backward", "torch.autograd.grad")


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
loop body or function frees the graph. A loop over a model's outputs inside one step is not a
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
        return prechecks.call_in_training_step(tree, _retains_by_keyword)

    def check(self, model: FileModel) -> Iterator[Hit]:
        sites = model.call_sites
        for index, site in enumerate(sites):
            if not self._retains(model, site.call) or not in_training_step(site, sites):
                continue
            # The rest of the step: later calls in the same training-loop body, or in the same function.
            # Any later backward needs this one's retain_graph (a retaining one is judged itself).
            step = step_loop(site, sites)
            later = (s for s in sites[index + 1:] if s.function is site.function and (step is None or step in s.loops))
            if any(self._backward(model, s.call) for s in later):
                continue
            yield Hit(site.call, (
                "retain_graph=True on the step's last backward keeps its graph into the next step; "
                "detach the carried state instead"),
                subject=_carried_state(site))

    @staticmethod
    def _backward(model: FileModel, call) -> bool:
        if method_name(call) == "backward":
            return True
        return model.imports.qualify(call.func) in _GRAD_CALLS

    def _retains(self, model: FileModel, call) -> bool:
        return self._backward(model, call) and is_true(keyword(call, "retain_graph"))


def _retains_by_keyword(call: ast.Call) -> bool:
    """Any call given `retain_graph=True`: the precheck does not resolve which function it is."""
    return any(k.arg == "retain_graph" and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


def _carried_state(site: CallSite) -> str:
    """The state the step feeds to a call and takes back from it (`out, hidden = rnn(x, hidden)`),
    named as the probe names its holder (`self.h` in class Trainer: `Trainer.h`); "" when none.
    The probe measures that state's graph growing, and joins it to this finding through the name."""
    scope = site.loop or site.function
    if scope is None:
        return ""
    for node in descendants(scope):
        if not (isinstance(node, cst.Assign) and isinstance(node.value, cst.Call)):
            continue
        fed = {dotted(arg.value) for arg in node.value.args} - {None}
        for target in node.targets:
            taken = target.target.elements if isinstance(target.target, (cst.Tuple, cst.List)) else (target.target,)
            for element in taken:
                name = dotted(element.value if isinstance(element, cst.Element) else element)
                if name in fed:
                    return _holder_name(name, site)
    return ""


def _holder_name(name: str, site: CallSite) -> str:
    head, _, rest = name.partition(".")
    params = site.function.params.params if site.function is not None else ()
    if rest and site.owner_class is not None and params and params[0].name.value == head:
        return f"{site.owner_class.name.value}.{rest}"
    return name
