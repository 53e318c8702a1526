"""Every call in a file with where it sits: its function, class, innermost loop.

Several rules ask about calls anywhere in a file (`MyFn.forward(...)`, `torch.cuda.empty_cache()`
in a loop); one pass collects them all, with plain attribute reads (see prescan.py for why not
libcst's visitor).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import libcst as cst

from gradlint import parse
from gradlint.names import code, dotted
from gradlint.prescan import child_nodes
from gradlint.torch_api import TRAINING_ITERABLE, makes_a_step


@dataclass(frozen=True)
class CallSite:
    call: cst.Call
    function: cst.FunctionDef | None  # innermost def around it
    owner_class: cst.ClassDef | None  # innermost class around it
    loops: tuple[cst.For | cst.While, ...]  # the loops around it within its function, outermost first
    # Under an `if` whose test takes a remainder (`if step % 100 == 0:`) within its innermost loop:
    # the call runs every so many iterations, not every one.
    periodic: bool = False
    # The `with` items around it within its function, outermost first (`torch.no_grad()`): the
    # analysis qualifies them, this pass has no imports.
    contexts: tuple[cst.BaseExpression, ...] = ()
    # On a branch of an `if` (within its function) whose test reads grad mode or whether a tensor
    # requires grad (`if not torch.is_grad_enabled():`, `if x.requires_grad:`): the code chooses
    # between its autograd and no-grad paths there.
    grad_tested: bool = False

    @property
    def loop(self) -> cst.For | cst.While | None:
        return self.loops[-1] if self.loops else None


def collect_call_sites(module: cst.Module) -> list[CallSite]:
    """In document order. A top-level statement's calls depend on it alone: they are kept with
    it (parse.memo) for the next lint of the same text."""
    found: list[CallSite] = []
    for statement in module.body:
        found.extend(parse.memo("calls", statement, statement, lambda: _call_sites_in(statement)))
    return found


def _call_sites_in(statement: cst.CSTNode) -> tuple[CallSite, ...]:
    found: list[CallSite] = []
    _visit(statement, found, None, None, (), False, (), False)
    return tuple(found)


def _visit(node: cst.CSTNode, found: list[CallSite], function, owner, loops, periodic, contexts, tested) -> None:
    # A module-level function, not a closure calling itself: that closure is a reference cycle,
    # and through `found` it would keep the whole tree alive until the cyclic collector ran
    # (tests/test_reference_cycles.py checks that a lint leaves no tree to it).
    kind = type(node)
    if kind is cst.FunctionDef:
        for decorator in node.decorators:
            _visit(decorator, found, function, owner, loops, periodic, contexts, tested)
        _visit(node.body, found, node, owner, (), False, (), False)
        return
    if kind is cst.ClassDef:
        for child in (*node.bases, *node.keywords, *node.decorators):
            _visit(child, found, function, owner, loops, periodic, contexts, tested)
        _visit(node.body, found, function, node, loops, periodic, contexts, tested)
        return
    if kind is cst.Call:
        found.append(CallSite(node, function, owner, loops, periodic, contexts, tested))
    if kind is cst.For or kind is cst.While:
        loops, periodic = (*loops, node), False
    if kind is cst.If:
        _visit(node.test, found, function, owner, loops, periodic, contexts, tested)
        inner = periodic or _takes_a_remainder(node.test)
        branch = tested or _reads_grad_mode(node.test)
        _visit(node.body, found, function, owner, loops, inner, contexts, branch)
        if node.orelse is not None:
            _visit(node.orelse, found, function, owner, loops, inner, contexts, branch)
        return
    if kind is cst.With:
        for item in node.items:
            _visit(item, found, function, owner, loops, periodic, contexts, tested)
        _visit(node.body, found, function, owner, loops, periodic,
               (*contexts, *(item.item for item in node.items)), tested)
        return
    for child in child_nodes(node):
        _visit(child, found, function, owner, loops, periodic, contexts, tested)


def _takes_a_remainder(test: cst.BaseExpression) -> bool:
    stack = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            return True
        stack.extend(child_nodes(node))
    return False


_GRAD_MODE_READS = frozenset({"is_grad_enabled", "is_inference_mode_enabled", "requires_grad"})


def _reads_grad_mode(test: cst.BaseExpression) -> bool:
    stack = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute) and node.attr.value in _GRAD_MODE_READS:
            return True
        stack.extend(child_nodes(node))
    return False


def method_name(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _steps_optimizer(call: cst.Call) -> bool:
    """`opt.step()`, `scaler.step(opt)`; not `env.step(action)`. Not `zero_grad()` alone: a saliency
    map or Grad-CAM clears the model's gradients before its backward, and trains nothing."""
    method = method_name(call)
    return method == "step" and makes_a_step(method, dotted(call.func.value))


def keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


class LoopFacts(Protocol):
    """What the analysis knows of a call that one pass over calls cannot: the file's imports and defs."""

    def grad_off(self, site: CallSite) -> bool:
        """Whether the call runs with grad off (a `with torch.no_grad():` around it, a no-grad def)."""

    def runs_steps(self, site: CallSite) -> bool:
        """Whether the call runs a def of the file with a training loop of its own (`train(epoch)`)."""


def step_loop(site: CallSite, sites: list[CallSite], facts: LoopFacts | None = None) -> cst.For | cst.While | None:
    """The loop whose one iteration is the training step the call runs in: the innermost around it
    that steps an optimizer itself or goes over a loader/dataset/epochs, unless the steps are made
    in a loop of their own nested in it (the call then runs once per epoch, or per collection of
    data, between many steps). A loop over the step's losses, heads or optimizers is part of one
    step. Given what the analysis knows of calls (`facts`), a loop that is a training loop by its
    header alone is not one when it evaluates or when it calls a def that runs the steps itself
    (`for epoch in ...: train(epoch); torch.cuda.empty_cache()`: once per epoch), `_not_a_step`.
    None: the function is the step, or the call is in no step."""
    optimizer_calls = [s for s in sites if _steps_optimizer(s.call) and s.function is site.function]
    step_loops = {id(loop) for s in optimizer_calls if (loop := _own_step_loop(s)) is not None}
    for loop in reversed(site.loops):
        training = id(loop) in step_loops or (TRAINING_ITERABLE.search(code(_header(loop))) is not None
                                              and not (facts is not None and _not_a_step(loop, site, sites, facts)))
        if not training:
            if any(loop in s.loops for s in optimizer_calls):
                return None  # the steps are in a loop nested in this one: the call is between steps
            continue
        inner = _loops_inside(loop, site, sites)
        if any(id(other) in step_loops or TRAINING_ITERABLE.search(code(_header(other))) for other in inner):
            return None  # an epoch loop around the step loop: once per epoch, not per step
        return loop
    return None


def _not_a_step(loop: cst.For | cst.While, site: CallSite, sites: list[CallSite], facts: LoopFacts) -> bool:
    """Whether a loop its header alone made a training loop is none:
    - it evaluates: nothing in it trains (no backward, zero_grad or optimizer step among its
      calls) and it runs with grad off, around the call (`with torch.no_grad():` over the loop, an
      `@torch.no_grad()` evaluate) or around the work in it (`with torch.no_grad(): out = model(x)`
      in the body). Real code: DGL's evaluate() and inference scripts clear the cache per batch,
      labelled fine;
    - it calls a def that runs a training loop of its own: each of its iterations is many steps
      (ogb's `for epoch in ...: loss = train(epoch); torch.cuda.empty_cache(); test()`, labelled
      fine: once per epoch)."""
    inside = [s for s in sites if s.function is site.function and loop in s.loops]
    if any(facts.runs_steps(s) for s in inside):
        return True
    if any(_trains(s.call) for s in inside):
        return False
    return facts.grad_off(site) or any(facts.grad_off(s) for s in inside)


def runs_a_training_loop(function: cst.FunctionDef, sites: list[CallSite]) -> bool:
    """Whether a def steps an optimizer or runs backward inside a loop of its own, or loops over a
    loader, dataset or epochs."""
    own = [s for s in sites if s.function is function and s.loops]
    return any(_trains(s.call) for s in own) \
        or any(TRAINING_ITERABLE.search(code(_header(loop))) for s in own for loop in s.loops)


def _trains(call: cst.Call) -> bool:
    method = method_name(call)
    return method in ("backward", "zero_grad") or _steps_optimizer(call) \
        or (isinstance(call.func, cst.Name) and call.func.value == "backward")


_OPTIMIZER_LIST = re.compile(r"optim|\bopts?\b|schedulers?|param", re.IGNORECASE)


def _header(loop: cst.For | cst.While) -> cst.BaseExpression:
    return loop.iter if isinstance(loop, cst.For) else loop.test


def _own_step_loop(site: CallSite) -> cst.For | cst.While | None:
    """The innermost loop around an optimizer step that is not a loop over optimizers."""
    for loop in reversed(site.loops):
        if not (isinstance(loop, cst.For) and _OPTIMIZER_LIST.search(code(loop.iter))):
            return loop
    return None


def _loops_inside(loop: cst.For | cst.While, site: CallSite, sites: list[CallSite]) -> list[cst.For | cst.While]:
    """The loops nested in `loop` (as the calls of its function show them) that do not hold `site`."""
    found: dict[int, cst.For | cst.While] = {}
    for other in sites:
        if other.function is not site.function or loop not in other.loops:
            continue
        for inner in other.loops[other.loops.index(loop) + 1:]:
            if inner not in site.loops:
                found[id(inner)] = inner
    return list(found.values())


def in_training_step(site: CallSite, sites: list[CallSite], facts: LoopFacts | None = None) -> bool:
    """Whether a call runs once per training step: in a loop (or, outside loops, a function with no
    training loop of its own) that also steps an optimizer (`.step()`), or in a loop over a
    loader/dataset/epochs.
    A loop over a model's outputs or over devices inside one step is not one."""
    if site.loops:
        return step_loop(site, sites, facts) is not None
    optimizer_calls = [s for s in sites if _steps_optimizer(s.call)]
    # Outside loops, the function is one step unless it steps the optimizer inside a training loop
    # of its own (over a loader, or calling backward): then the call runs once, before or after
    # that loop. A loop over optimizers (`for opt in opts: opt.step()`) is still inside one step.
    if site.function is None:
        return False
    backward_loops = {id(loop) for s in sites if method_name(s.call) == "backward" for loop in s.loops}

    def training_loop(loop: cst.For | cst.While) -> bool:
        iterable = loop.iter if isinstance(loop, cst.For) else loop.test
        return id(loop) in backward_loops or bool(TRAINING_ITERABLE.search(code(iterable)))

    own = [s for s in optimizer_calls if s.function is site.function]
    return bool(own) and not any(training_loop(loop) for s in own for loop in s.loops)

