"""Calls of an autograd Function class that do not go through `apply`.

Two questions, over the Function classes of the file:
- `direct_forward_calls(model)`: `MyFn.forward(...)` outside the Function and its subclasses,
  with the `MyFn.apply(...)` call that would replace it;
- `function_instantiations(model)`: `MyFn()` (an instance, whose call raises), with whether the
  instance is called on the spot (`MyFn()(x)`, which `MyFn.apply(x)` replaces).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradlint.file_model import FileModel
from gradlint.names import dotted
from gradlint.rewrites import code


@dataclass(frozen=True)
class DirectForwardCall:
    """`MyFn.forward(...)` called by other code: the custom backward is never attached."""

    node: cst.Call
    function: str  # the Function's name
    # The source of the `MyFn.apply(...)` call that replaces it, the first argument (forward's
    # ctx) dropped; None when the first argument is not positional.
    apply_instead: str | None


def direct_forward_calls(model: FileModel) -> list[DirectForwardCall]:
    """In document order; calls inside the Function itself or a subclass (composing its own
    forward) are left out, and so are calls on a branch that tests grad mode."""
    found = []
    for site in model.call_sites:
        name = model.function_class_call(site.call, "forward")
        if name is None:
            continue
        if site.owner_class is not None and name in model.ancestors(site.owner_class.name.value):
            continue
        if site.grad_tested:
            # The code picks its no-grad path there (unsloth's decode fast path, under `if not
            # (torch.is_grad_enabled() and X.requires_grad):`): skipping apply's cost is the point.
            # Under `with torch.no_grad()` alone it is still reported: nothing shows the result
            # is never differentiated, and forward(None, ...) breaks once forward uses ctx.
            continue
        found.append(DirectForwardCall(site.call, name, _apply_instead(site.call)))
    return found


def _apply_instead(call: cst.Call) -> str | None:
    args = call.args
    if not args or args[0].keyword is not None or args[0].star:
        return None
    rest = list(args[1:])
    if rest:  # the last argument keeps or drops a trailing comma as written
        rest[-1] = rest[-1].with_changes(comma=args[-1].comma)
    return code(call.with_changes(func=call.func.with_changes(attr=cst.Name("apply")), args=rest))


@dataclass(frozen=True)
class FunctionInstantiation:
    """`MyFn()` with no arguments, on a Function class of the file."""

    node: cst.Call
    function: str  # the Function's name
    called: bool  # the instance is called on the spot: `MyFn()(x)`


def function_instantiations(model: FileModel) -> list[FunctionInstantiation]:
    """In document order."""
    instantiations = {}
    for site in model.call_sites:
        name = dotted(site.call.func)
        if name in model.function_class_names and not site.call.args:
            instantiations[site.call] = name
    called = {site.call.func for site in model.call_sites if site.call.func in instantiations}
    return [FunctionInstantiation(call, name, call in called) for call, name in instantiations.items()]
