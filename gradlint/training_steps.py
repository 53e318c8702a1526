"""The calls a training step makes: what runs once per step, and which backward is a step's last.

Two questions:
- `training_step_calls(model, qualified)`: the calls to one function (`torch.cuda.empty_cache`)
  made in a training step, each a `CallSite` that says whether it runs only every so many steps
  (`periodic`: under `if step % 100 == 0:`);
- `retained_last_backwards(model)`: the `backward(retain_graph=True)` (or `torch.autograd.grad` /
  `torch.autograd.backward` with it) that no later backward of the same step needs, with the state
  the step carries into the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradlint.call_sites import CallSite, in_training_step, is_true, keyword, method_name, step_loop
from gradlint.file_model import FileModel
from gradlint.names import dotted
from gradlint.prescan import descendants

_GRAD_CALLS = ("torch.autograd.backward", "torch.autograd.grad")


def training_step_calls(model: FileModel, qualified: str) -> list[CallSite]:
    """The calls that run `qualified` (FileModel.runs_through: it, or a def of the project that
    calls it) in a training step: a training loop's body, a step function, a Function's or Module's
    forward, or a framework's per-step method, in document order."""
    return [site for site in model.call_sites
            if model.in_training_step(site) and model.runs_through(site.call, qualified) is not None]


@dataclass(frozen=True)
class RetainedBackward:
    """The last backward of a training step, called with retain_graph=True."""

    node: cst.Call
    # The state the step feeds to a call and takes back from it (`out, hidden = rnn(x, hidden)`),
    # named as the runtime probe names its holder (`self.h` in class Trainer: `Trainer.h`); "" if none.
    carried_state: str


def retained_last_backwards(model: FileModel) -> list[RetainedBackward]:
    """The retaining backwards of a training step that no later backward of the same step (later in
    the training-loop body, or in the same function) needs; a retaining later one is judged itself."""
    sites = model.call_sites
    found = []
    for index, site in enumerate(sites):
        if not _retains(model, site.call) or not in_training_step(site, sites):
            continue
        step = step_loop(site, sites)
        later = (s for s in sites[index + 1:] if s.function is site.function and (step is None or step in s.loops))
        if any(_backward(model, s.call) or _runs_backward(s.call) for s in later):
            continue
        found.append(RetainedBackward(site.call, _carried_state(site)))
    return found


def _backward(model: FileModel, call: cst.Call) -> bool:
    if method_name(call) == "backward":
        return True
    return model.imports.qualify(call.func) in _GRAD_CALLS


def _runs_backward(call: cst.Call) -> bool:
    """A call given `retain_graph=`, whatever it is named, runs a backward: only APIs that do
    take the keyword (tianshou's optimizer wrapper, `self.critic_optim.step(critic1_loss,
    retain_graph=True)`, backwards the loss it is given)."""
    return keyword(call, "retain_graph") is not None


def _retains(model: FileModel, call: cst.Call) -> bool:
    return _backward(model, call) and is_true(keyword(call, "retain_graph"))


def _carried_state(site: CallSite) -> str:
    """The probe measures the carried state's graph growing, and joins it to the finding through
    this name."""
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
