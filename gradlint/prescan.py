"""One cheap pass over a function before it is walked.

The walk needs a few facts up front (which names the function assigns or declares global,
which values feed backward(), which parameters are used as Python scalars or as tensors,
which loops run training steps); this pass collects them with plain attribute reads.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Iterator

import libcst as cst

from gradlint import torch_api as api
from gradlint.names import dotted


# Fields that hold only whitespace and punctuation: never worth descending into.
_SKIPPED_FIELDS = frozenset({
    "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after_decorators", "header",
    "footer", "colon", "equal", "dot", "operator", "asynchronous", "star", "walrus", "lbracket",
    "rbracket", "lbrace", "rbrace", "newline", "indent", "trailing_whitespace", "trailing_comma",
    "whitespace_after_at", "whitespace_before_colon", "arrow", "whitespace_after_star",
    "whitespace_after_param", "whitespace_before_params", "whitespace_after_def",
    "whitespace_after_class", "whitespace_after_arg", "whitespace_before_args",
})
_FIELDS: dict[type, tuple[str, ...]] = {}


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Direct children that can hold code. Plain attribute reads: libcst's own visitor rebuilds
    every node it passes and costs about as much as the parse (measured on torch's sources). A
    list, not a generator: every caller takes all of them, and the 3.4 million calls of a run
    over torch's sources spent a quarter of their time resuming a generator."""
    fields = _FIELDS.get(type(node))
    if fields is None:
        # libcst declares `__slots__` with an annotation, so it is a dataclass field too: a tuple of
        # slot names on every node, read and searched for nodes at every visit until left out here.
        fields = _FIELDS[type(node)] = tuple(
            f for f in node.__dataclass_fields__
            if f not in _SKIPPED_FIELDS and not f.startswith(("whitespace", "__")))
    found: list[cst.CSTNode] = []
    known = _NODE_TYPES
    for name in fields:
        value = getattr(node, name)
        kind = type(value)
        if kind is list or kind is tuple:
            found.extend(value)  # libcst's sequence fields hold nodes only (Sequence[BaseStatement], ...)
        else:
            is_node = known.get(kind)
            if is_node is None:
                is_node = _is_node(kind)
            if is_node:
                found.append(value)
    return found


_NODE_TYPES: dict[type, bool] = {}


def _is_node(kind: type) -> bool:
    known = _NODE_TYPES.get(kind)
    if known is None:  # isinstance against libcst's abstract bases is slow: ask once per type
        known = _NODE_TYPES[kind] = issubclass(kind, cst.CSTNode)
    return known


class Prescan:
    """One cheap pass over a function body (nested functions and classes excluded) for the
    facts the walk needs before it starts: which names are assigned or declared global, which
    feed backward(), which parameters are used as Python scalars, which loops run steps."""

    def __init__(self, root: cst.CSTNode, imported: frozenset[str] = frozenset()) -> None:
        self.imported = imported  # `dist.scatter(out, src)`: a module's function, not a tensor method
        self.assigned: set[str] = set()
        self.augmented: set[str] = set()  # only ever `x += ...`: updated, never created here
        self.declared_global: set[str] = set()
        self.declared_nonlocal: set[str] = set()
        self.backward_roots: set[str] = set()
        self.item_backward_roots: set[str] = set()  # `losses[-1].backward()`: their items are graphs
        self.scalar_uses: set[str] = set()
        # Names used the way only tensors are: a tensor method's receiver, a torch.* argument,
        # saved for backward. A forward input with no such use is not assumed to be a tensor
        # (ctx.group = group in torch.distributed is a process group, not a tensor).
        self.tensor_uses: set[str] = set()
        self.attribute_uses: set[str] = set()  # read only through `.shape`/`.dtype`/... (see _attribute)
        self.arithmetic: list[tuple[str, str]] = []
        # Names whose items are used as tensors (`edge_index[0].contiguous()`, `src, dst =
        # edge_index` with src used as one): a tensor or a container of tensors, either way tensors.
        self.item_uses: set[str] = set()
        self.unpacked: list[tuple[str, str]] = []  # (target, source): `a, b = source`, `for a in source`
        self.tuple_unpacked: list[tuple[str, str]] = []  # (target, source) of `a, b = source` only
        self.sliced: list[tuple[str, str]] = []  # (target, source) of `target = source[...]`
        # `return out`: in an autograd forward, the one value returned is the output tensor.
        self.single_returns: set[str] = set()
        self.step_loops: set[int] = set()  # ids of loops whose body calls backward/step/zero_grad
        self.rollout_loops: set[int] = set()  # ids of loops that step an environment (`env.step(a)`)
        self.all_loops: list[cst.CSTNode] = []
        self.loop_parent: dict[int, int | None] = {}  # a loop's id -> the id of the loop it is in
        self.optimizer_loops: set[int] = set()  # the innermost loop around each `opt.step()`
        # Anything that can keep a value past the statement: attribute or subscript stores,
        # `+=`, a name bound in a loop, container methods, setattr, globals. A function with none yields no events
        # a rule asks about except returns, so ordinary walks skip it.
        self.stores = False
        self.module_uses: set[str] = set()  # names `.parameters()` and the like are called on
        self.frozen: set[str] = set()  # `teacher.requires_grad_(False)`: its outputs carry no graph
        self.deletes = False  # `del x[:]`, `x.clear()`: may empty a container
        self.calls_backward = False
        self.called_names: set[str] = set()  # functions and methods called, by their last name
        # Those called with no `with` around them, and for the rest the `with` statements around
        # each call (a caller's `with torch.no_grad(): model.inference(...)`: FileModel reads the
        # contexts through the file's imports, which this pass does not have).
        self.called_outside_with: set[str] = set()
        self.called_in_with: dict[str, list[tuple[cst.With, ...]]] = {}
        # Names only ever called as a method of the def's first parameter (`self.forward_step(...)`):
        # such a call reaches that method of the caller's own class hierarchy, no other class's.
        first = root.params.params[0].name.value if isinstance(root, cst.FunctionDef) and root.params.params else None
        self._first_param = first
        self._called_otherwise: set[str] = set()
        self.called_on_self: set[str] = set()
        self._withs: list[cst.With] = []
        self.applies = False  # calls some `X.apply(...)` (GL206 asks the walk what it passes)
        # Names checked to be int64 where a wrong dtype stops the code: `assert idx.dtype ==
        # torch.long`, `check(t.dtype == torch.int64, ...)`, `if t.dtype != torch.long: raise`.
        self.int64_pins: set[str] = set()
        self.hook_registrations: list[cst.Call] = []  # `layer.register_forward_hook(hook)`
        # Calls of a plain name with the names they pass: `_launch(q, cos, sin)`, `kernel[grid](x, ptr)`
        # (callee, positional names or None, keyword -> name): a helper's use of its parameter is
        # evidence for what the caller passed (FileModel.tensor_params).
        self.name_calls: list[tuple[str, tuple[str | None, ...], tuple[tuple[str, str], ...]]] = []
        # `tl.load(ptr + offs)`, `tl.store(out_ptr, v)`, `tl.make_block_ptr(base, ...)`: (module
        # alias, name) of a Triton pointer, which is a tensor where the kernel is launched.
        self.pointer_uses: set[tuple[str, str]] = set()
        # Those under an `if`, with the names each enclosing test reads (None: a test that reads
        # none): they count once every test reads only values the kernel loaded (see _runtime_ifs).
        self._guarded_pointers: list[tuple[str, str, tuple[frozenset[str] | None, ...]]] = []
        self._loaded: set[str] = set()  # `mask = tl.load(p).to(tl.int1)`: a value read at run time
        self._bound_otherwise: set[str] = set()  # names also bound some other way
        self.atomic_sums: set[str] = set()  # module aliases of `<alias>.atomic_add(ptr, value)` calls
        # `tl.store(q_ptr + offs, v)`, `tl.atomic_add(...)`: (module alias, name) of a pointer the
        # kernel writes through, under an `if` or not (a branch that may run writes too).
        self.pointer_writes: set[tuple[str, str]] = set()
        self.root = root
        self._loops: list[cst.CSTNode] = []
        self._ifs = 0
        self._tests: list[frozenset[str] | None] = []  # the enclosing ifs' test names
        body = root.body if isinstance(root, cst.FunctionDef) else root
        self._visit(body)
        if self._guarded_pointers:
            self._runtime_ifs()

    def _visit(self, node: cst.CSTNode) -> None:
        kind = type(node)
        if kind in _NESTED_SCOPES:
            return
        note = _NOTES.get(kind)
        if note is not None:
            note(self, node)
        is_loop = kind is cst.For or kind is cst.While
        if is_loop:
            self.loop_parent[id(node)] = id(self._loops[-1]) if self._loops else None
            self.all_loops.append(node)
            self._loops.append(node)
        if kind is cst.If:
            self._ifs += 1
            self._tests.append(_test_names(node.test))
        if kind is cst.With:  # its items run outside it, its body inside
            for item in node.items:
                self._visit(item)
            self._withs.append(node)
            self._visit(node.body)
            self._withs.pop()
            return
        for child in child_nodes(node):
            self._visit(child)
        if is_loop:
            self._loops.pop()
        if kind is cst.If:
            self._ifs -= 1
            self._tests.pop()

    def _called(self, name: str) -> None:
        self.called_names.add(name)
        if self._withs:
            self.called_in_with.setdefault(name, []).append(tuple(self._withs))
        else:
            self.called_outside_with.add(name)

    def _runtime_ifs(self) -> None:
        """A pointer used under ifs whose tests read only values the kernel loaded is a pointer
        whatever the launch: Triton compiles both branches of such an `if` (only a constexpr
        test, or `x is None` on an argument, is decided at compile time and prunes a branch), so
        `if not_skip == 1: tl.load(ref_logp_ptr)` fails to compile unless a tensor is passed (fla's
        GRPO kernel, its mask read with `tl.load(mask_ptr)`)."""
        runtime = self._loaded - self._bound_otherwise - self.augmented
        for alias, base, tests in self._guarded_pointers:
            if all(test is not None and test <= runtime for test in tests):
                self.pointer_uses.add((alias, base))

    def _assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name) and _loaded_at_run_time(node.value):
                self._loaded.add(target.target.value)
            else:
                self._bound_otherwise.update(target_names(target.target))
        # `inputs = args[:n]`: what inputs holds, args holds
        if isinstance(node.value, cst.Subscript) and isinstance(node.value.value, cst.Name):
            self.sliced.extend((t.target.value, node.value.value.value) for t in node.targets if isinstance(t.target, cst.Name))
        # `src, dst = edge_index`: if src is used as a tensor, edge_index holds tensors.
        if isinstance(node.value, cst.Name):
            for target in node.targets:
                if isinstance(target.target, (cst.Tuple, cst.List)):
                    pairs = [(name, node.value.value) for name in target_names(target.target)]
                    self.unpacked.extend(pairs)
                    self.tuple_unpacked.extend(pairs)

    def _assign_target(self, node: cst.AssignTarget) -> None:
        self.assigned.update(target_names(node.target))
        # ctx.x = / self.x = / d[k] = / a, b = ; and in a loop `total = total + loss`, which the
        # next iteration reads
        if not isinstance(node.target, cst.Name) or self._loops:
            self.stores = True

    def _aug_assign(self, node: cst.AugAssign) -> None:
        self.augmented.update(target_names(node.target))
        self.stores = True

    def _ann_assign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.assigned.update(target_names(node.target))
            self._bound_otherwise.update(target_names(node.target))
            self.stores = True

    def _for(self, node: cst.For) -> None:
        self.assigned.update(target_names(node.target))
        self._bound_otherwise.update(target_names(node.target))
        if isinstance(node.iter, cst.Name):  # `for w in weights`: w a tensor, weights holds tensors
            self.unpacked.extend((name, node.iter.value) for name in target_names(node.target))

    def _comp_for(self, node: cst.CompFor) -> None:
        if isinstance(node.iter, cst.Name):
            self.unpacked.extend((name, node.iter.value) for name in target_names(node.target))

    def _with_item(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.assigned.update(target_names(node.asname.name))
            self._bound_otherwise.update(target_names(node.asname.name))

    def _named_expr(self, node: cst.NamedExpr) -> None:
        self.assigned.update(target_names(node.target))
        self._bound_otherwise.update(target_names(node.target))

    def _del(self, node: cst.Del) -> None:
        self.deletes = True  # `del x[:]` empties a container (trained_buffers.py)

    def _global(self, node: cst.Global) -> None:
        self.declared_global.update(n.name.value for n in node.names)
        self.stores = True

    def _nonlocal(self, node: cst.Nonlocal) -> None:
        self.declared_nonlocal.update(n.name.value for n in node.names)

    def _if(self, node: cst.If) -> None:
        if isinstance(node.test, cst.Name):
            self.scalar_uses.add(node.test.value)
        raises = any(isinstance(small, cst.Raise) for line in node.body.body
                     if isinstance(line, cst.SimpleStatementLine) for small in line.body)
        if raises:
            self.int64_pins |= _int64_tested(node.test, equal=False)

    def _assert(self, node: cst.Assert) -> None:
        self.int64_pins |= _int64_tested(node.test, equal=True)

    def _unary(self, node: cst.UnaryOperation) -> None:
        if isinstance(node.operator, cst.Not) and isinstance(node.expression, cst.Name):
            self.scalar_uses.add(node.expression.value)

    def _return(self, node: cst.Return) -> None:
        if isinstance(node.value, cst.Name):
            self.single_returns.add(node.value.value)

    def _attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, cst.Name) and node.attr.value in api.TENSOR_ATTRIBUTES:
            # `.shape`, `.dtype`, `.device` ... a NumPy array has too: a tensor as far as GL101
            # reports, but not enough to rewrite a store into save_for_backward(...)
            shared = node.attr.value in api.NUMPY_SHARED_ATTRIBUTES
            (self.attribute_uses if shared else self.tensor_uses).add(node.value.value)

    def _binary(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.left, cst.Name) and isinstance(node.right, cst.Name):
            self.arithmetic.append((node.left.value, node.right.value))

    @cached_property
    def tensor_names(self) -> frozenset[str]:
        """tensor_uses and attribute_uses, plus names in arithmetic with one of them (`x * w`)."""
        names = self.tensor_uses | self.attribute_uses
        changed = True
        while changed:
            changed = False
            for a, b in self.arithmetic:
                for known, other in ((a, b), (b, a)):
                    if known in names and other not in names and other not in self.scalar_uses:
                        names.add(other)
                        changed = True
        return frozenset(names)

    @cached_property
    def epoch_loops(self) -> frozenset[int]:
        """Loops with a training loop inside them (one that steps an optimizer or goes over a
        loader): what they run outside the inner loop runs once per epoch, not once per step."""
        found: set[int] = set()
        for loop in self.all_loops:
            header = loop.iter if isinstance(loop, cst.For) else loop.test
            if id(loop) in self.optimizer_loops or api.TRAINING_ITERABLE.search(_text(header)):
                parent = self.loop_parent.get(id(loop))
                while parent is not None:
                    found.add(parent)
                    parent = self.loop_parent.get(parent)
        return frozenset(found - self.optimizer_loops)  # a loop that steps itself is a step loop

    @cached_property
    def tuple_sources(self) -> frozenset[str]:
        """Names unpacked into several targets (`a, b = source`): they hold a fixed number of things."""
        return frozenset(source for _, source in self.tuple_unpacked)

    @cached_property
    def returned_items(self) -> frozenset[str]:
        """`event_t, y = ans` where `return ans`: in an autograd forward, the items of the output."""
        return frozenset(target for target, source in self.tuple_unpacked if source in self.single_returns)

    @cached_property
    def tensor_holders(self) -> frozenset[str]:
        """Names not known as tensors whose items are: indexed or unpacked into tensors."""
        # Unpacked: the target itself used as only a tensor is (not `x * a`: a may be a float).
        holders = self.item_uses | {source for target, source in self.unpacked if target in self.tensor_uses}
        changed = True
        while changed:  # `inputs = args[:n]` with inputs holding tensors: so does args
            extra = {source for target, source in self.sliced if target in holders} - holders
            holders |= extra
            changed = bool(extra)
        return frozenset(holders - self.tensor_names - self.scalar_uses)

    def _subscript(self, node: cst.Subscript) -> None:
        # x.shape[p]: p is an int.
        if isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape":
            for element in node.slice:
                if isinstance(element.slice, cst.Index) and isinstance(element.slice.value, cst.Name):
                    self.scalar_uses.add(element.slice.value.value)

    def _call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name):
            self._called(func.value)
            self._called_otherwise.add(func.value)
            self.called_on_self.discard(func.value)
        callee = func.value if isinstance(func, cst.Name) else (
            func.value.value if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name) else None)
        if callee is not None and not any(a.star for a in node.args):
            positional = tuple(a.value.value if isinstance(a.value, cst.Name) else None
                               for a in node.args if a.keyword is None)
            keywords = tuple((a.keyword.value, a.value.value) for a in node.args
                             if a.keyword is not None and isinstance(a.value, cst.Name))
            if any(positional) or keywords:
                self.name_calls.append((callee, positional, keywords))
        if isinstance(func, cst.Attribute) and func.attr.value in _POINTER_FUNCTIONS and node.args \
                and isinstance(func.value, (cst.Name, cst.Attribute)):
            base = _pointer_base(node.args[0].value)
            # Under an `if` (`if USE_BLOCK_COUNTS: tl.load(block_counts + i)`) the launch may pass
            # an int instead: only an unconditional load says the argument is a tensor.
            if base is not None and func.attr.value in _POINTER_WRITES:
                self.pointer_writes.add((dotted(func.value) or "", base))
            if base is not None and not self._ifs:
                self.pointer_uses.add((dotted(func.value) or "", base))
            elif base is not None:
                self._guarded_pointers.append((dotted(func.value) or "", base, tuple(self._tests)))
            if func.attr.value == "atomic_add" and len(node.args) >= 2 and not isinstance(node.args[1].value, cst.Integer):
                # `tl.atomic_add(dw_ptr + c, dw)`: a sum in the order the programs arrive (a counter's
                # `tl.atomic_add(lock, 1)` is an exact integer count)
                self.atomic_sums.add(dotted(func.value) or "")
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            self._called(method)
            if self._first_param is not None and isinstance(func.value, cst.Name) \
                    and func.value.value == self._first_param and method not in self._called_otherwise:
                self.called_on_self.add(method)
            else:
                self._called_otherwise.add(method)
                self.called_on_self.discard(method)
            if method in STORING_METHODS:
                self.stores = True
            elif method == "clear":
                self.deletes = True  # `self.hidden.clear()` empties a container too (trained_buffers.py)
            if method == "backward":
                self.calls_backward = True
            elif method == "apply":
                self.applies = True
            elif method in api.FORWARD_HOOK_REGISTRATIONS:
                self.hook_registrations.append(node)
            receiver = func.value.value if isinstance(func.value, cst.Name) else None
            # `edge_index[0].contiguous()`: a tensor, or a container of tensors; either way what
            # is kept of it (on ctx) is tensors.
            indexed = _indexed_name(func.value)
            keywords = (a.keyword.value for a in node.args if a.keyword is not None)
            proof = api.proves_a_tensor(method, bool(node.args), keywords) or (method == "to" and self._integer_dtype(node))
            if indexed is not None and indexed not in self.imported and proof:
                self.item_uses.add(indexed)
            if receiver is not None and method in api.MODULE_ONLY_METHODS:
                self.module_uses.add(receiver)
            if receiver is not None and method == "requires_grad_" and _is_false_argument(node):
                self.frozen.add(receiver)
            if receiver not in self.imported:
                if receiver is not None and proof:
                    self.tensor_uses.add(receiver)
                elif proof and isinstance(func.value, cst.Attribute):
                    # `pattern.bitmask.is_contiguous()`: that attribute of pattern is a tensor
                    chain = dotted(func.value)
                    if chain is not None and chain.split(".")[0] not in self.imported:
                        self.tensor_uses.add(chain)
                if method in api.TENSOR_ARGUMENT_POSITIONS:
                    self._tensor_args(node, api.TENSOR_ARGUMENT_POSITIONS[method])
            torch_function = (dotted(func) or "").startswith(("torch.", "F.", "th."))
            if method == "save_for_backward":
                self._tensor_args(node, None)
            elif torch_function:
                self._tensor_args(node, api.TENSOR_FUNCTION_POSITIONS.get(method, (0,)))
            if method == "backward":
                self.backward_roots.update(_roots(func.value))
                if isinstance(func.value, cst.Subscript) and isinstance(func.value.value, cst.Name):
                    self.item_backward_roots.add(func.value.value.value)  # `losses[-1].backward()`
            positional = [a for a in node.args if a.keyword is None and not a.star]
            receiver_name = (dotted(func.value) or "").rsplit(".", 1)[-1]
            if positional and (method == "manual_backward" or (method == "backward" and _BACKWARD_WRAPPER.match(receiver_name))):
                # `accelerator.backward(loss)`, `self.manual_backward(loss)`: the argument is the root
                self.backward_roots.update(_roots(positional[0].value))
                self.calls_backward = True
            if api.makes_a_step(method, dotted(func.value)):
                self.step_loops.update(id(loop) for loop in self._loops)
                if method == "step" and self._loops:
                    self.optimizer_loops.add(id(self._loops[-1]))
            elif method == "step" and api.steps_a_simulator(dotted(func.value)):
                # `envs.step(action)`: one iteration of the loop around it is one environment step
                self.rollout_loops.update(id(loop) for loop in self._loops[-1:])
            if method in api.SHAPE_TAKING_METHODS:
                # torch.softmax(scores, dim): the function form takes the tensor first
                self._scalar_args(node, skip=1 if torch_function else 0)
        for arg in node.args:  # KORNIA_CHECK(t.dtype == torch.int64, ...), torch._check(...)
            if isinstance(arg.value, cst.Comparison):
                self.int64_pins |= _int64_tested(arg.value, equal=True)
        name = dotted(func)
        if name == "setattr":
            self.stores = True
        last = (name or "").split(".")[-1]
        if name in api.SCALAR_CONVERSIONS or last in ("zeros", "ones", "empty", "full", "arange", "randn", "rand", "eye"):
            self._scalar_args(node)
        if last in ("backward", "grad") and (name or "").startswith(("torch.autograd.", "autograd.")) and node.args:
            self.backward_roots.update(_roots(node.args[0].value))
        for arg in node.args:
            kw = arg.keyword.value if arg.keyword else None
            if kw in ("dim", "k", "dim_size", "num_segments", "size", "axis", "eps") and isinstance(arg.value, cst.Name):
                self.scalar_uses.add(arg.value.value)

    @staticmethod
    def _integer_dtype(node: cst.Call) -> bool:
        """`.to(torch.int64)`: an nn.Module's `.to` refuses integer dtypes, so this is a tensor's."""
        return any((dotted(a.value) or "").rsplit(".", 1)[-1] in api.INTEGER_DTYPE_NAMES
                   and (dotted(a.value) or "").startswith(("torch.", "th.")) for a in node.args)

    def _tensor_args(self, node: cst.Call, positions: tuple[int, ...] | None) -> None:
        """The names passed at `positions` (all, for None) are used as tensors."""
        positional = [a for a in node.args if a.keyword is None and not a.star]
        for i, arg in enumerate(positional):
            if positions is not None and i not in positions:
                continue
            if isinstance(arg.value, cst.Name):
                self.tensor_uses.add(arg.value.value)

    def _scalar_args(self, node: cst.Call, skip: int = 0) -> None:
        positional = [a for a in node.args if a.keyword is None]
        for arg in positional[skip:]:
            if isinstance(arg.value, cst.Name):
                self.scalar_uses.add(arg.value.value)


_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
# What a method of this name may store into its receiver (project.py's _may_store asks it too).
STORING_METHODS = api.CONTAINER_STORING_METHODS | {"save_for_backward"}
_NOTES = {
    cst.Call: Prescan._call,
    cst.Assign: Prescan._assign,
    cst.AssignTarget: Prescan._assign_target,
    cst.AugAssign: Prescan._aug_assign,
    cst.AnnAssign: Prescan._ann_assign,
    cst.For: Prescan._for,
    cst.CompFor: Prescan._comp_for,
    cst.WithItem: Prescan._with_item,
    cst.NamedExpr: Prescan._named_expr,
    cst.Global: Prescan._global,
    cst.Nonlocal: Prescan._nonlocal,
    cst.If: Prescan._if,
    cst.Assert: Prescan._assert,
    cst.UnaryOperation: Prescan._unary,
    cst.Subscript: Prescan._subscript,
    cst.Attribute: Prescan._attribute,
    cst.BinaryOperation: Prescan._binary,
    cst.Return: Prescan._return,
    cst.Del: Prescan._del,
}


def _text(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


# Triton's functions whose first argument is a pointer (a tensor at the launch), and cuTile's
# (cuda.tile) whose first argument is the array (`ct.store(Q, index=..., tile=t)`,
# `ct.scatter(Q, indices, v)`): a tensor at `ct.launch` too.
_POINTER_FUNCTIONS = frozenset({"load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg",
                                "atomic_cas", "atomic_and", "atomic_or", "atomic_xor", "make_block_ptr",
                                "gather", "scatter"})
# Of those, the ones that write where the pointer points.
_POINTER_WRITES = frozenset({"store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas",
                             "atomic_and", "atomic_or", "atomic_xor", "scatter"})


# Who runs backward for the caller: accelerate, Fabric, DeepSpeed's engine, Lightning's strategy.
_BACKWARD_WRAPPER = re.compile(r"^(accelerator|fabric|engine|model_engine|strategy|precision\w*|trainer|ds_engine)$")


def _loaded_at_run_time(value: cst.BaseExpression) -> bool:
    """`tl.load(p)`, `tl.load(p + offs).to(tl.int1)`, `tl.program_id(0)`: a method chain on a
    module's load or program_id (only a kernel's pointer uses are counted: see _runtime_ifs)."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and isinstance(value.func.value, cst.Call):
        value = value.func.value
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
        and value.func.attr.value in ("load", "program_id") and isinstance(value.func.value, (cst.Name, cst.Attribute))


def _test_names(test: cst.BaseExpression) -> frozenset[str] | None:
    """The names an `if` test reads (an attribute's base, not its attribute); None when none."""
    names: set[str] = set()
    todo = [test]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Name):
            names.add(node.value)
        elif isinstance(node, cst.Attribute):
            todo.append(node.value)
        else:
            todo.extend(child_nodes(node))
    return frozenset(names) or None


def _pointer_base(expr: cst.BaseExpression) -> str | None:
    """`ptr`, `ptr + offs`, `ptr + i * stride + offs` -> "ptr" (the leftmost name of the sum)."""
    while isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        expr = expr.left
    return expr.value if isinstance(expr, cst.Name) else None


def _int64_tested(test: cst.BaseExpression, equal: bool) -> set[str]:
    """`t.dtype == torch.int64` (equal) or `t.dtype != torch.long` (not equal) -> {"t"}."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return set()
    left, right = test.left, test.comparisons[0].comparator
    operator = test.comparisons[0].operator
    wanted = (cst.Equal, cst.Is) if equal else (cst.NotEqual, cst.IsNot)
    if not isinstance(operator, wanted):
        return set()
    for subject, dtype in ((left, right), (right, left)):
        name = dotted(dtype) or ""
        if isinstance(subject, cst.Attribute) and subject.attr.value == "dtype" and isinstance(subject.value, cst.Name) \
                and name.startswith(("torch.", "th.")) and name.rsplit(".", 1)[-1] in ("int64", "long"):
            return {subject.value.value}
    return set()


def block_leaves(statements) -> bool:
    """Whether a block (a statement list, or a one-line suite's small statements) surely leaves
    the def: it ends in a return or raise, or in an `if` each of whose branches, an else
    included, does."""
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, (cst.Return, cst.Raise)):
        return True
    if isinstance(last, cst.SimpleStatementLine):
        return any(isinstance(small, (cst.Return, cst.Raise)) for small in last.body)
    if isinstance(last, cst.If):
        branch: cst.If | cst.Else | None = last
        while isinstance(branch, cst.If):
            if not block_leaves(branch.body.body):
                return False
            branch = branch.orelse
        return branch is not None and block_leaves(branch.body.body)
    return False


def blocks_of(statement: cst.CSTNode) -> Iterator:
    """The statement lists nested in a compound statement (not functions or classes)."""
    if isinstance(statement, (cst.If, cst.For, cst.While, cst.With)):
        yield statement.body.body
        orelse = getattr(statement, "orelse", None)
        while orelse is not None:
            if isinstance(orelse, cst.If):
                yield orelse.body.body
                orelse = orelse.orelse
            else:
                yield orelse.body.body
                orelse = None
    elif isinstance(statement, (cst.Try, cst.TryStar)):
        yield statement.body.body
        for handler in statement.handlers:
            yield handler.body.body
        if statement.orelse is not None:
            yield statement.orelse.body.body
        if statement.finalbody is not None:
            yield statement.finalbody.body.body
    elif isinstance(statement, cst.Match):
        for case in statement.cases:
            yield case.body.body


def descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The node and everything under it that can hold code, nested functions included."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(child_nodes(current))


def target_names(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from target_names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from target_names(target.value)


def assigned_paths(target: cst.BaseExpression, through_subscripts: bool = False) -> Iterator[str]:
    """The names and dotted attributes an assignment target binds (`a`, `self.h`, both of
    `a, *self.b`); with `through_subscripts`, also what `d[k] = v` stores into (`d`)."""
    if isinstance(target, (cst.Name, cst.Attribute)):
        name = dotted(target)
        if name is not None:
            yield name
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from assigned_paths(element.value, through_subscripts)
    elif isinstance(target, cst.StarredElement):
        yield from assigned_paths(target.value, through_subscripts)
    elif through_subscripts and isinstance(target, cst.Subscript):
        yield from assigned_paths(target.value, through_subscripts)


def _indexed_name(expr: cst.BaseExpression) -> str | None:
    """`name[...]` -> name."""
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name):
        return expr.value.value
    return None


def _is_false_argument(call: cst.Call) -> bool:
    """`requires_grad_(False)` or `requires_grad_(requires_grad=False)`."""
    return len(call.args) == 1 and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == "False"


def _roots(expr: cst.BaseExpression) -> Iterator[str]:
    """Names a `.backward()` receiver is computed from: `(loss / acc).backward()` -> loss."""
    if isinstance(expr, cst.Name):
        yield expr.value
    elif isinstance(expr, cst.BinaryOperation):
        yield from _roots(expr.left)
        yield from _roots(expr.right)
    elif isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute):
            yield from _roots(expr.func.value)
        for arg in expr.args:
            yield from _roots(arg.value)
    elif isinstance(expr, cst.Subscript):
        yield from _roots(expr.value)
