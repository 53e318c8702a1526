"""Every call in a file with where it sits: its function, class, innermost loop.

Several rules ask about calls anywhere in a file (`MyFn.forward(...)`, `torch.cuda.empty_cache()`
in a loop); one pass collects them all, with plain attribute reads (see prescan.py for why not
libcst's visitor).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradlint.names import code, dotted
from gradlint.prescan import child_nodes
from gradlint.torch_api import TRAINING_ITERABLE, makes_a_step


@dataclass(frozen=True)
class CallSite:
    call: cst.Call
    function: cst.FunctionDef | None  # innermost def around it
    owner_class: cst.ClassDef | None  # innermost class around it
    loops: tuple[cst.For | cst.While, ...]  # the loops around it within its function, outermost first

    @property
    def loop(self) -> cst.For | cst.While | None:
        return self.loops[-1] if self.loops else None


def collect_call_sites(module: cst.Module) -> list[CallSite]:
    """In document order."""
    found: list[CallSite] = []

    def visit(node: cst.CSTNode, function, owner, loops) -> None:
        kind = type(node)
        if kind is cst.FunctionDef:
            for decorator in node.decorators:
                visit(decorator, function, owner, loops)
            visit(node.body, node, owner, ())
            return
        if kind is cst.ClassDef:
            for child in (*node.bases, *node.keywords, *node.decorators):
                visit(child, function, owner, loops)
            visit(node.body, function, node, loops)
            return
        if kind is cst.Call:
            found.append(CallSite(node, function, owner, loops))
        if kind is cst.For or kind is cst.While:
            loops = (*loops, node)
        for child in child_nodes(node):
            visit(child, function, owner, loops)

    visit(module, None, None, ())
    return found


def method_name(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _steps_optimizer(call: cst.Call) -> bool:
    """`opt.step()`, `opt.zero_grad()`; not `env.step(action)`."""
    method = method_name(call)
    return method in ("step", "zero_grad") and makes_a_step(method, dotted(call.func.value))


def keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def step_loop(site: CallSite, sites: list[CallSite]) -> cst.For | cst.While | None:
    """The loop whose one iteration is the training step the call runs in: the innermost around it
    that steps an optimizer or goes over a loader/dataset/epochs (a loop over the step's losses or
    heads is part of one step). None: the function is the step, or there is no loop."""
    optimizer_calls = [s for s in sites if _steps_optimizer(s.call)]
    for loop in reversed(site.loops):
        iterable = loop.iter if isinstance(loop, cst.For) else loop.test
        if any(loop in s.loops for s in optimizer_calls) or TRAINING_ITERABLE.search(code(iterable)):
            return loop
    return None


def in_training_step(site: CallSite, sites: list[CallSite]) -> bool:
    """Whether a call runs once per training step: in a loop (or, outside loops, a function with no
    training loop of its own) that also steps an optimizer (`.step()`, `.zero_grad()`), or in a
    loop over a loader/dataset/epochs.
    A loop over a model's outputs or over devices inside one step is not one."""
    if site.loops:
        return step_loop(site, sites) is not None
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

