"""In-place writes into an autograd Function's forward inputs, and what marks them dirty.

One question, `inplace_input_writes(model, function, forward)`: the statements of forward that
change an input's data in place (`x.add_(...)`, `x[...] = v`, `x += v`, `torch.relu_(x)`,
`F.relu(x, inplace=True)`, `torch.add(a, b, out=x)`, also through an alias or a view of it, or by
a def forward hands it to: nested, of the file, or of another project module), with how sure each
is to be a tensor's change, and the inputs forward (or setup_context, for a
setup_context-style Function) may mark dirty. Plus `inputs_without_gradient(function)`: the inputs
backward always answers with a literal None.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradlint import torch_api as api
from gradlint.call_sites import is_true, keyword
from gradlint.file_model import AutogradFunction, FileModel, all_params, arguments_by_param, leading_params, returns_in
from gradlint.prescan import blocks_of, child_nodes, target_names
from gradlint.values import Kind


@dataclass(frozen=True)
class InplaceWrite:
    """One in-place change of a forward input's data."""

    node: cst.CSTNode  # the call or statement that writes
    input: str  # the forward input whose data changes
    via: str  # the name it is changed through: the input's own, an alias or a view of it
    # How sure the change is a tensor's: "call" (an in-place tensor method or torch function: any
    # input not known to be a scalar), "store" (`x[...] = v`: a list or dict takes that too, so the
    # input must be known to be a tensor), "augmented" (`x += v` on a name: on an int or float it
    # rebinds the name, so only an input used directly as a tensor or annotated as one counts).
    evidence: str
    input_kind: Kind  # what the analysis infers the input to be
    used_as_tensor: bool  # annotated as a Tensor, or used directly as one in forward
    # The def forward hands the input to that changes it (`clamp_()`, `clamp_() (ops/clamp.py:4)`
    # for another module's), or None when forward changes it itself.
    helper: str | None = None

    @property
    def on_a_tensor(self) -> bool:
        """Whether the evidence is enough to call this a tensor's in-place change."""
        if self.input_kind is Kind.SCALAR:
            return False
        if self.evidence == "store":
            return self.input_kind is Kind.TENSOR
        if self.evidence == "augmented":
            return self.used_as_tensor
        return True


@dataclass(frozen=True)
class ForwardInplaceWrites:
    """The in-place writes of one forward, in statement order, and the inputs that may be marked
    dirty: mark_dirty(*xs), or ctx handed to a helper that may call it, counts as all of them."""

    writes: tuple[InplaceWrite, ...]
    may_be_marked_dirty: frozenset[str]
    marked_in: str  # where mark_dirty belongs: "forward", or "setup_context" for that style


NO_WRITES = ForwardInplaceWrites((), frozenset(), "forward")

# Builtins that can be handed ctx without marking anything dirty.
_CTX_SAFE_BUILTINS = api.SCALAR_BUILTINS | {"setattr", "getattr", "delattr"}


def inplace_input_writes(model: FileModel, function: AutogradFunction,
                         forward: cst.FunctionDef) -> ForwardInplaceWrites:
    """The in-place writes into `function`'s forward inputs, when `forward` is its forward."""
    if function.style not in ("ctx", "setup_context"):
        return NO_WRITES
    signature = forward.params
    params = [*signature.posonly_params, *signature.params, *signature.kwonly_params][leading_params(forward):]
    ctx = None
    if function.style == "ctx":
        if not params:
            return NO_WRITES
        ctx, params = params[0].name.value, params[1:]
    inputs = [p.name.value for p in params]
    scan = _ForwardScan(model, ctx, inputs)
    scan.block(forward.body.body, {name: name for name in inputs})
    if not scan.mutations:
        return NO_WRITES
    if scan.dirty_unknown:
        dirty = set(inputs)
    else:
        dirty = scan.dirty if ctx is not None else _dirty_in_setup_context(model, function, inputs)
    prescan = model.prescan(forward)
    # The same evidence the other rules use: a forward parameter is a tensor only when the code
    # treats it as one (annotation, tensor methods, torch.* arguments, arithmetic with one).
    kinds = {p.name.value: model.input_value(p, prescan).kind for p in params}
    direct = {p.name.value for p in params if p.name.value in prescan.tensor_uses or (
        p.annotation is not None and "Tensor" in model.module.code_for_node(p.annotation.annotation))}
    writes = tuple(InplaceWrite(m.node, m.param, m.via, m.evidence, kinds.get(m.param, Kind.UNKNOWN),
                                m.param in direct, m.helper) for m in scan.mutations)
    return ForwardInplaceWrites(writes, frozenset(dirty), "setup_context" if ctx is None else "forward")


def inputs_without_gradient(function: AutogradFunction) -> frozenset[str]:
    """Forward inputs for which every return of backward is a literal None: inputs the author
    treats as non-differentiable (indices, running statistics, output buffers)."""
    inputs = function.forward_inputs
    if inputs is None or function.backward is None:
        return frozenset()
    returns = [r.value for r in returns_in(function.backward)]
    if not returns or any(r is None for r in returns):
        return frozenset()
    found = set(range(len(inputs)))
    for value in returns:
        elements = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
        found &= {i for i, e in enumerate(elements) if isinstance(e, cst.Name) and e.value == "None"}
    return frozenset(inputs[i].name.value for i in found)


@dataclass(frozen=True)
class _Mutation:
    node: cst.CSTNode
    param: str
    via: str
    evidence: str
    helper: str | None = None


# How deep calls into helpers are followed (forward -> helper -> its helper ...).
_MAX_HELPER_DEPTH = 3
# The evidence a helper's change of its parameter carries to the caller: the surest it has.
_SURENESS = {"augmented": 0, "store": 1, "call": 2}


def _meet(*states: dict[str, str]) -> dict[str, str]:
    """Names that hold the same input on every path."""
    first, *rest = states
    return {name: param for name, param in first.items() if all(s.get(name) == param for s in rest)}


def _basic_index(element: cst.SubscriptElement) -> bool:
    """Slices, integer literals, `...` and None: indexing that gives a view, never a copy."""
    if isinstance(element.slice, cst.Slice):
        return True
    value = element.slice.value
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        value = value.expression
    return isinstance(value, (cst.Integer, cst.Ellipsis)) or (isinstance(value, cst.Name) and value.value == "None")


class _ForwardScan:
    """forward's statements in order, with the names that still hold an input or a view of one.
    A name rebound on some path (`x = x.clone()` in one branch) no longer counts as the input."""

    def __init__(self, model: FileModel, ctx: str | None, inputs: list[str], depth: int = 0):
        self.model = model
        self.ctx = ctx
        self.depth = depth  # 0 for forward, 1 for a helper forward calls, ...
        self.mutations: list[_Mutation] = []
        self.held: dict[str, set[str]] = {p: {p} for p in inputs}  # every input a name ever held
        self.dirty: set[str] = set()
        # mark_dirty(*xs), or ctx handed to a helper that may call it: no input can be reported.
        self.dirty_unknown = False
        self.nested: dict[str, cst.FunctionDef] = {}

    # ----- what an expression is ------------------------------------------------------------

    def root(self, expr: cst.BaseExpression, live: dict[str, str]) -> tuple[str, str] | None:
        """(input, name) when `expr` is an input, an alias of one, or a view of one."""
        if isinstance(expr, cst.Name):
            return (live[expr.value], expr.value) if expr.value in live else None
        if isinstance(expr, cst.Subscript) and all(_basic_index(e) for e in expr.slice):
            return self.root(expr.value, live)
        if isinstance(expr, cst.Attribute) and expr.attr.value in ("T", "mT", "H", "mH"):
            return self.root(expr.value, live)
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
                and expr.func.attr.value in api.ALWAYS_VIEW_METHODS | api.SELF_WHEN_NOTHING_TO_DO:
            return self.root(expr.func.value, live)
        return None

    def alias(self, expr: cst.BaseExpression, live: dict[str, str]) -> tuple[str, str] | None:
        """What `name = expr` makes `name` hold: in-place methods return their receiver."""
        found = self.root(expr, live)
        if found is None and isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
                and expr.func.attr.value in api.INPLACE_TENSOR_METHODS:
            found = self.root(expr.func.value, live)
        return found

    def written(self, call: cst.Call, live: dict[str, str]) -> list[tuple[str, str]]:
        """The inputs a call writes into."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in api.INPLACE_TENSOR_METHODS:
            found = self.root(func.value, live)
            if found is not None:
                return [found]
        name = self.model.imports.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if name is None or not name.startswith("torch."):
            return []
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        unbound_method = name.startswith("torch.Tensor.") and name.rsplit(".", 1)[-1] in api.INPLACE_TENSOR_METHODS
        if positional and (name in api.INPLACE_TORCH_FUNCTIONS or unbound_method or (
                name.startswith("torch.nn.functional.") and is_true(keyword(call, "inplace")))):
            found = self.root(positional[0], live)
            return [found] if found is not None else []
        out = keyword(call, "out")
        targets = [e.value for e in out.elements] if isinstance(out, (cst.Tuple, cst.List)) else [out] if out else []
        return [f for f in (self.root(t, live) for t in targets) if f is not None]

    # ----- expressions ----------------------------------------------------------------------

    def expression(self, node: cst.CSTNode, live: dict[str, str]) -> None:
        if isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            return
        if isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            live = dict(live)
            clause = node.for_in
            while clause is not None:
                for name in target_names(clause.target):
                    live.pop(name, None)
                clause = clause.inner_for_in
        for child in child_nodes(node):
            self.expression(child, live)
        if isinstance(node, cst.Call):
            self.call(node, live)
        elif isinstance(node, cst.NamedExpr):
            self.bind(node.target, node.value, live)

    def call(self, call: cst.Call, live: dict[str, str]) -> None:
        func = call.func
        if self.ctx is not None and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
                and func.value.value == self.ctx:
            if func.attr.value == "mark_dirty":
                for arg in call.args:
                    if arg.star:
                        self.dirty_unknown = True
                    elif isinstance(arg.value, cst.Name):
                        # Any input the name held on any path: a branch may mark what another rebinds.
                        self.dirty |= self.held.get(arg.value.value, set())
                    else:
                        found = self.root(arg.value, live)
                        if found is not None:
                            self.dirty.add(found[0])
            return
        if self.ctx is not None and any(isinstance(a.value, cst.Name) and a.value.value == self.ctx for a in call.args):
            helper = None
            if isinstance(func, cst.Name):
                if func.value in _CTX_SAFE_BUILTINS and func.value not in self.nested \
                        and func.value not in self.model.functions:
                    return
                helper = self.nested.get(func.value) or self.model.functions.get(func.value)
            if helper is None or "mark_dirty" in self.model.module.code_for_node(helper):
                self.dirty_unknown = True
        for param, via in self.written(call, live):
            self.mutations.append(_Mutation(call, param, via, "call"))
        self.helper_writes(call, live)
        self.kernel_writes(call, live)

    def kernel_writes(self, call: cst.Call, live: dict[str, str]) -> None:
        """An input handed to a Triton kernel of the file that writes through that pointer
        (`_rope_kernel[grid](q, ...)` with `tl.store(q_ptr + offs, v)`): the launch changes it in
        place (liger's M-RoPE rotates `q.transpose(1, 2).contiguous()`, q itself when contiguous)."""
        func = call.func
        if any(arg.star for arg in call.args):
            return
        if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name):
            name, args, language = func.value.value, list(call.args), "Triton"
        elif self.model.imports.qualify(func) == "cuda.tile.launch" and len(call.args) == 4 \
                and isinstance(call.args[2].value, cst.Name) and isinstance(call.args[3].value, cst.Tuple):
            # `ct.launch(stream, grid, kernel, (q, k, ...))`: the tuple is the kernel's arguments
            name, language = call.args[2].value.value, "cuTile"
            args = [cst.Arg(element.value) for element in call.args[3].value.elements
                    if isinstance(element, cst.Element)]
        else:
            return
        kernel = self.model.functions.get(name)
        written = self.model.kernel_writes(kernel) if kernel is not None else frozenset()
        if not written:
            return
        param_of = {id(arg): param for param, arg in arguments_by_param(kernel, args).items()}
        for arg in args:
            found = self.root(arg.value, live) if param_of.get(id(arg)) in written else None
            if found is not None:
                self.mutations.append(_Mutation(call, found[0], found[1], "call", f"the {language} kernel {name}"))

    def helper_writes(self, call: cst.Call, live: dict[str, str]) -> None:
        """An input handed to a def that changes that parameter in place: a def nested in forward,
        one of this file, or one another module of the project defines and this file imports
        (`tensor_clamp_(x, lo, hi)` doing `torch.min(x, hi, out=x)`). The def is read as forward
        is, with its parameters as the inputs; a star argument leaves the call unknown."""
        func = call.func
        if not isinstance(func, cst.Name) or func.value in self.held or self.depth >= _MAX_HELPER_DEPTH \
                or any(arg.star for arg in call.args):
            return
        given = [(arg, self.root(arg.value, live)) for arg in call.args]
        if all(found is None for _, found in given):
            return
        name = func.value
        helper = self.nested.get(name) or self.model.functions.get(name)
        if helper is not None:
            changed, shown = _params_changed(self.model, helper, self.depth + 1), f"{name}()"
        else:
            with self.model.imported_def(name) as found:
                if found is None:
                    return
                model, helper, where = found
                changed, shown = _params_changed(model, helper, self.depth + 1), f"{name}() ({where})"
        if not changed:
            return
        param_of = {id(arg): param for param, arg in arguments_by_param(helper, call.args).items()}
        for arg, found in given:
            param = param_of.get(id(arg))
            if found is not None and param in changed:
                self.mutations.append(_Mutation(call, found[0], found[1], changed[param], shown))

    # ----- statements -----------------------------------------------------------------------

    def bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None, live: dict[str, str]) -> None:
        held = self.alias(value, live) if value is not None and isinstance(target, cst.Name) else None
        for name in target_names(target):
            live.pop(name, None)
        if held is not None:
            live[target.value] = held[0]
            self.held.setdefault(target.value, set()).add(held[0])

    def stored(self, target: cst.BaseExpression, node: cst.CSTNode, live: dict[str, str]) -> None:
        """`x[...] = v` writes into x, whatever the index is."""
        if isinstance(target, cst.Subscript):
            found = self.root(target.value, live)
            if found is not None:
                self.mutations.append(_Mutation(node, found[0], found[1], "store"))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.stored(element.value, node, live)

    def block(self, statements, live: dict[str, str]) -> dict[str, str]:
        for statement in statements:
            live = self.statement(statement, live)
        return live

    def statement(self, node: cst.CSTNode, live: dict[str, str]) -> dict[str, str]:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self.small(small, live)
            return live
        if isinstance(node, cst.If):
            self.expression(node.test, live)
            body = self.block(node.body.body, dict(live))
            orelse = live
            if isinstance(node.orelse, cst.If):
                orelse = self.statement(node.orelse, dict(live))
            elif node.orelse is not None:
                orelse = self.block(node.orelse.body.body, dict(live))
            return _meet(body, orelse)
        if isinstance(node, (cst.For, cst.While)):
            self.expression(node.iter if isinstance(node, cst.For) else node.test, live)
            entry = dict(live)
            if isinstance(node, cst.For):
                for name in target_names(node.target):
                    entry.pop(name, None)
            after = _meet(entry, self.block(node.body.body, dict(entry)))
            return self.block(node.orelse.body.body, after) if node.orelse is not None else after
        if isinstance(node, cst.With):
            for item in node.items:
                self.expression(item.item, live)
                if item.asname is not None:
                    self.bind(item.asname.name, None, live)
            return self.block(node.body.body, live)
        if isinstance(node, (cst.Try, cst.TryStar)):
            body = self.block(node.body.body, dict(live))
            start = _meet(live, body)
            ends = [self.block(node.orelse.body.body, dict(body)) if node.orelse is not None else body]
            ends += [self.block(h.body.body, dict(start)) for h in node.handlers]
            end = _meet(*ends)
            return self.block(node.finalbody.body.body, _meet(end, start)) if node.finalbody is not None else end
        if isinstance(node, cst.FunctionDef):
            self.nested[node.name.value] = node
            live.pop(node.name.value, None)
            return live
        if isinstance(node, cst.ClassDef):
            live.pop(node.name.value, None)
            return live
        if isinstance(node, cst.Match):
            self.expression(node.subject, live)
            return _meet(live, *(self.block(case.body.body, dict(live)) for case in node.cases))
        for block in blocks_of(node):
            live = self.block(block, live)
        return live

    def small(self, node: cst.BaseSmallStatement, live: dict[str, str]) -> None:
        if isinstance(node, cst.Assign):
            self.expression(node.value, live)
            for target in node.targets:
                self.stored(target.target, node, live)
            for target in node.targets:
                self.bind(target.target, node.value, live)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                self.expression(node.value, live)
                self.stored(node.target, node, live)
                self.bind(node.target, node.value, live)
        elif isinstance(node, cst.AugAssign):
            self.expression(node.value, live)
            if isinstance(node.target, cst.Name) and node.target.value in live:
                self.mutations.append(_Mutation(node, live[node.target.value], node.target.value, "augmented"))
            else:
                self.stored(node.target, node, live)
        elif isinstance(node, cst.Del):
            for name in target_names(node.target):
                live.pop(name, None)
        else:
            for child in child_nodes(node):
                self.expression(child, live)


def _params_changed(model: FileModel, function: cst.FunctionDef, depth: int) -> dict[str, str]:
    """The parameters a def changes in place, each with the surest evidence it has of it."""
    params = [p.name.value for p in all_params(function)]
    scan = _ForwardScan(model, None, params, depth)
    scan.block(function.body.body, {name: name for name in params})
    changed: dict[str, str] = {}
    for mutation in scan.mutations:
        if _SURENESS[mutation.evidence] > _SURENESS.get(changed.get(mutation.param, ""), -1):
            changed[mutation.param] = mutation.evidence
    return changed


def _dirty_in_setup_context(model: FileModel, function: AutogradFunction, inputs: list[str]) -> set[str]:
    """The inputs setup_context marks dirty (a setup_context-style Function marks them there).
    Anything it marks that cannot be traced to one input counts as all of them."""
    setup = function.setup_context
    names = [p.name.value for p in setup.params.params][leading_params(setup):] if setup is not None else []
    if len(names) < 3:
        return set()
    ctx, packed = names[0], names[1]
    position: dict[str, int | None] = {}  # a name unpacked from `inputs`, by its position there
    calls: list[cst.Call] = []

    _unpacked_and_calls(setup.body, packed, position, calls)
    marked: set[str] = set()
    for call in calls:
        func = call.func
        is_ctx_method = isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == ctx
        if not is_ctx_method:
            builtin = isinstance(func, cst.Name) and func.value in _CTX_SAFE_BUILTINS \
                and func.value not in model.functions
            if not builtin and any(isinstance(a.value, cst.Name) and a.value.value == ctx for a in call.args):
                return set(inputs)  # a helper with ctx may mark anything
            continue
        if func.attr.value != "mark_dirty":
            continue
        for arg in call.args:
            value = arg.value
            index: int | None = None
            if isinstance(value, cst.Name) and value.value in position:
                index = position[value.value]
            elif isinstance(value, cst.Subscript) and isinstance(value.value, cst.Name) and value.value.value == packed:
                index = _literal_index(value)
            if arg.star or index is None or index >= len(inputs):
                return set(inputs)
            marked.add(inputs[index])
    return marked


def _unpacked_and_calls(node: cst.CSTNode, packed: str, position: dict[str, int | None],
                        calls: list[cst.Call]) -> None:
    """_dirty_in_setup_context's walk of setup_context: the names unpacked from `inputs` and the
    calls. Module-level, not a closure calling itself (a reference cycle: see call_sites._visit)."""
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return
    if isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value == packed:
        for target in node.targets:
            if isinstance(target.target, (cst.Tuple, cst.List)):
                starred = False
                for i, element in enumerate(target.target.elements):
                    starred = starred or isinstance(element, cst.StarredElement)
                    for name in target_names(element.value):
                        position[name] = None if starred else i
    if isinstance(node, cst.Assign) and isinstance(node.value, cst.Subscript) \
            and isinstance(node.value.value, cst.Name) and node.value.value.value == packed:
        index = _literal_index(node.value)
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                position[target.target.value] = index
    if isinstance(node, cst.Call):
        calls.append(node)
    for child in child_nodes(node):
        _unpacked_and_calls(child, packed, position, calls)


def _literal_index(subscript: cst.Subscript) -> int | None:
    if len(subscript.slice) == 1 and isinstance(subscript.slice[0].slice, cst.Index) \
            and isinstance(subscript.slice[0].slice.value, cst.Integer):
        return int(subscript.slice[0].slice.value.value)
    return None
