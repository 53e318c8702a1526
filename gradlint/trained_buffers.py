"""Containers that hold graph-attached values on purpose: what backward is later run on, then emptied.

REINFORCE and actor-critic keep each step's log-probability in a list until the episode ends,
compute the loss from the list, call backward and empty it (PyTorch's own examples:
`policy.saved_log_probs.append(m.log_prob(action))`, then `del policy.saved_log_probs[:]`);
gradient accumulation does the same with a list of losses. The graphs are needed and freed each
round: that is no leak. A list that backward never reads (a loss history for logging) leaks
even when it is emptied every epoch, and one that is never emptied leaks whatever reads it.

A container one method fills and another empties, not one per epoch, is the object's own
per-round state too (a pipeline schedule's micro-batch losses and forward caches, cleared by
`_update_losses` and `clear_runtime_states` in torch.distributed.pipelining): exempt as well. One
emptied in the function that fills it (`self.epoch_losses.clear()` after the epoch's loop) or by
an `on_*_epoch_end` hook (Lightning's `training_step_outputs`) holds an epoch of graphs: reported.

A container is named by its last attribute or its plain name (`policy.saved_log_probs` and
`self.saved_log_probs` are the same list), the way the file would refer to it from any method.

The module's top level is read too, on its own: a script's `if __name__ == "__main__":` block is
where many training loops live (spikingjelly's A2C example makes `log_probs = []` anew each update
and runs backward through `torch.cat(log_probs)`). A container it both trains and empties is
exempt; its names are the module's globals, named plainly. It is not matched with the defs'
facts by name: a def's parameter `log_probs` is not the script's list (spikingjelly's PPO example
passes `torch.cat(log_probs).detach()` under that name to the def that runs backward).
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from gradlint.names import dotted
from gradlint.prescan import assigned_paths, child_nodes

_NESTED = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_ADDING = frozenset({"append", "extend", "insert", "appendleft", "extendleft", "add", "update", "setdefault"})
_EMPTYING = frozenset({"clear"})
_NEW_CONTAINERS = frozenset({"list", "dict", "set", "deque", "collections.deque", "defaultdict",
                             "collections.defaultdict", "OrderedDict", "collections.OrderedDict"})


def container_key(name: str, function: cst.FunctionDef | cst.Module | None = None) -> str:
    """An attribute by its last name (`policy.saved_log_probs` is `self.saved_log_probs`
    elsewhere); a local by its name and its function (two functions' `losses` are two lists); a
    name of the module's top level, a global, by its name alone."""
    if "." in name:
        return name.rsplit(".", 1)[-1]
    return f"{id(function)}:{name}" if isinstance(function, cst.FunctionDef) else name


Scope = cst.FunctionDef | cst.Module  # a def, or the module's top level


def trained_and_emptied(functions: list[cst.FunctionDef], facts_of: Callable[[cst.FunctionDef], "Facts"]) -> set[str]:
    """Keys of the containers some function runs backward through and some function (other
    than the one that creates them in `__init__`) empties, or that a function other than the ones
    that fill them empties, not at an epoch's end. `facts_of` reads a function (Facts)."""
    trained: set[str] = set()
    emptied: set[str] = set()
    emptied_elsewhere: set[str] = set()
    filled: set[str] = set()
    for function in functions:
        facts = facts_of(function)
        trained |= facts.trained()
        filled |= facts.added
        name = function.name.value
        if name != "__init__":
            emptied |= facts.emptied
            if "epoch" not in name.lower():
                emptied_elsewhere |= facts.emptied - facts.added
    return (trained & emptied) | (emptied_elsewhere & filled)


class Facts:
    """One function: what each name is computed from, what backward is called on (`trained()`:
    the keys of everything a backward in it is computed from), what it empties. Names are kept as
    written and made keys at the end, once its locals are known. Read from the def and the
    file's import names alone."""

    def __init__(self, function: Scope, imports):
        self.function = function
        self.imports = imports
        # name -> (where, names read): what was bound or added to it, at which point of the body
        self.sources: dict[str, list[tuple[int, set[str]]]] = {}
        self.roots: list[tuple[int, set[str]]] = []  # what backward is called on, and where
        self._explicitly_emptied: set[str] = set()  # clear(), del x[:], x[:] = []
        self._made: list[tuple[str, bool]] = []  # x = []: the name, whether inside a loop
        self._globals: set[str] = set()  # filled as the body is read: used at the end only
        self._bound: set[str] = set()
        self._added: set[str] = set()
        self._loops = 0
        self._at = 0  # statements and calls seen so far: the order of the body
        self._visit(function.body if isinstance(function, cst.FunctionDef) else function)

    def _key(self, name: str) -> str:
        local = "." not in name and name in self._bound and name not in self._globals
        return container_key(name, self.function if local else None)

    @property
    def added(self) -> set[str]:
        return {self._key(n) for n in self._added}

    @property
    def emptied(self) -> set[str]:
        """`x = []` empties a container only where it is no creation: in a loop (a new one each
        episode), or in a function that does not fill it (REINFORCE's finish_episode); the list
        an XBM memory starts from, made before the loop that fills it, is never emptied."""
        rebound = {name for name, in_loop in self._made
                   if in_loop or (("." in name or name in self._globals) and name not in self._added)}
        return {self._key(n) for n in self._explicitly_emptied | rebound}

    def trained(self) -> set[str]:
        """What backward reads, through what was bound before it: a `loss` made after the loop
        from a logging list is not what the `loss.backward()` inside the loop trained."""
        best: dict[str, int] = {}
        todo = [(name, at) for at, names in self.roots for name in names]
        while todo:
            name, before = todo.pop()
            if best.get(name, -1) >= before:
                continue
            best[name] = before
            for at, names in self.sources.get(name, ()):
                if at < before:
                    todo.extend((read, at) for read in names)
        return {self._key(name) for name in best}

    def _flows(self, target: str, value: cst.CSTNode) -> None:
        self.sources.setdefault(target, []).append((self._at, _read_names(value)))

    def _visit(self, node: cst.CSTNode) -> None:
        kind = type(node)  # exact types, once per node: isinstance on libcst's classes goes through ABCMeta
        if kind in _NESTED:
            return
        self._at += 1
        if kind is cst.For or kind is cst.While:
            self._visit_header(node)
            self._loops += 1
            self._visit(node.body)
            self._loops -= 1
            if node.orelse is not None:
                self._visit(node.orelse)
            return
        if kind is cst.Assign:
            for target in node.targets:
                self._bind(target.target, node.value)
        elif (kind is cst.AugAssign or kind is cst.AnnAssign) and node.value is not None:
            self._bind(node.target, node.value)
        elif kind is cst.CompFor:
            self._bind(node.target, node.iter)
        elif kind is cst.Del:
            self._delete(node.target)
        elif kind is cst.Global:
            self._globals.update(n.name.value for n in node.names)
        elif kind is cst.Call:
            self._call(node)
        for child in child_nodes(node):
            self._visit(child)

    def _visit_header(self, node: cst.For | cst.While) -> None:
        """A loop's header: run before the body."""
        if isinstance(node, cst.For):
            self._bind(node.target, node.iter)
            self._visit(node.iter)
        else:
            self._visit(node.test)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)) \
                and len(target.elements) == len(value.elements):
            for t, v in zip(target.elements, value.elements):  # `values, rewards = [], []`
                self._bind(t.value, v.value)
            return
        for name in assigned_paths(target):
            self._flows(name, value)
            if "." not in name:
                self._bound.add(name)
        if isinstance(target, cst.Subscript):
            container = dotted(target.value)
            if container is not None:
                self._flows(container, value)
                self._added.add(container)
                if _whole_slice(target) and isinstance(value, (cst.List, cst.Dict)) and not value.elements:
                    self._explicitly_emptied.add(container)  # x[:] = []
        elif isinstance(target, (cst.Name, cst.Attribute)) and _is_new_container(value, self.imports):
            name = dotted(target)
            if name is not None:
                # An attribute or a declared global made again is a reset; a local made here is new
                # (decided in `emptied`, once the function's `global` statements are all read).
                self._made.append((name, self._loops > 0))

    def _delete(self, target: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._delete(element.value)
        elif isinstance(target, cst.Subscript) and _whole_slice(target):
            name = dotted(target.value)
            if name is not None:
                self._explicitly_emptied.add(name)  # del x[:]

    def _call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute):
            receiver = dotted(func.value)
            method = func.attr.value
            if receiver is not None and method in _ADDING:
                self._added.add(receiver)
                for arg in node.args:
                    self._flows(receiver, arg.value)
            elif receiver is not None and method in _EMPTYING:
                self._explicitly_emptied.add(receiver)
            elif method == "backward":
                self.roots.append((self._at, _read_names(func.value)))
        name = self.imports.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if name in ("torch.autograd.backward", "torch.autograd.grad") and node.args:
            self.roots.append((self._at, _read_names(node.args[0].value)))




def _read_names(node: cst.CSTNode) -> set[str]:
    """The names and dotted attribute chains an expression reads."""
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Lambda):
            continue
        if isinstance(current, (cst.Name, cst.Attribute)):
            name = dotted(current)
            if name is not None:
                # `adv.pow(2)` reads adv; `policy.saved_log_probs` reads that attribute (and policy)
                parts = name.split(".")
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                if isinstance(current, cst.Attribute):
                    continue
        stack.extend(child_nodes(current))
    return found


def _whole_slice(target: cst.Subscript) -> bool:
    if len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Slice):
        return False
    whole = target.slice[0].slice
    return whole.lower is None and whole.upper is None and whole.step is None


def _is_new_container(value: cst.BaseExpression, imports) -> bool:
    """An empty container made on the spot: `[]`, `{}`, `deque()`; either branch of a choice
    (`[] if self.batch else {k: [] for k in ids}`, pytorch/examples' batched REINFORCE); a
    comprehension whose items are made on the spot too, so it holds nothing of the old one."""
    if isinstance(value, (cst.List, cst.Dict)) and not value.elements:
        return True
    if isinstance(value, cst.Call) and isinstance(value.func, (cst.Name, cst.Attribute)):
        return (imports.qualify(value.func) or "") in _NEW_CONTAINERS
    if isinstance(value, cst.IfExp):
        return _is_new_container(value.body, imports) and _is_new_container(value.orelse, imports)
    if isinstance(value, (cst.ListComp, cst.SetComp)):
        return _made_on_the_spot(value.elt, imports)
    if isinstance(value, cst.DictComp):
        return _made_on_the_spot(value.value, imports)
    return False


def _made_on_the_spot(item: cst.BaseExpression, imports) -> bool:
    """A comprehension's item that is no value of before: a new empty container or a literal."""
    return isinstance(item, (cst.Integer, cst.Float, cst.SimpleString)) or _is_new_container(item, imports)
