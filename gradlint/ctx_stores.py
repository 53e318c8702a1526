"""Tensors a custom autograd Function keeps as ctx attributes instead of saving them.

One question, `tensors_kept_on_ctx(model)`: each `ctx.<name> = value` (or `setattr(ctx, ...)`) in
a Function's forward or setup_context that keeps a tensor or a container of tensors, by what it
keeps (`OUTPUT`, a `VIEW` of the output, a `CONTAINER` of outputs, or a `TENSOR`: an input or an
intermediate), whether ctx holds two or more outputs of one call, and the rewrite that saves it
with `ctx.save_for_backward(...)` where every use of the attribute can be seen and rewritten.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass

import libcst as cst

from gradlint.file_model import AutogradFunction, FileModel, bindings_of, leading_params
from gradlint.flow import AttributeStore, ReturnValue, SavedForBackward, Walk
from gradlint.prescan import descendants
from gradlint.rewrites import code, first_statement, statement_in_body
from gradlint.rule import Change, DeleteLines, InsertLineAbove, Replace
from gradlint.saved_tensors import outputs_marked_non_differentiable as non_differentiable
from gradlint.torch_api import NUMPY_SHARED_ATTRIBUTES, TENSOR_ATTRIBUTES, TENSOR_PROOF_METHODS
from gradlint.values import Kind, Val

OUTPUT = "output"  # the Function's own output: a reference cycle through its grad_fn
VIEW = "view"  # a view of the output: a cycle the collector never frees
CONTAINER = "container"  # a container holding an output
TENSOR = "tensor"  # an input or an intermediate (or an output with no grad_fn): no version check


@dataclass(frozen=True)
class CtxStore:
    """A tensor kept as a ctx attribute."""

    node: cst.CSTNode  # the attribute stored to (`ctx.out`), or the setattr call
    function: str  # the Function's name
    ctx: str  # ctx's name in the method
    attribute: str  # the attribute's name; "<dynamic>" for setattr(ctx, name, value)
    kind: str  # OUTPUT, VIEW, CONTAINER or TENSOR
    several_values: bool  # a container of tensors, not one tensor
    several_outputs: bool  # ctx holds two or more outputs of one call: cycles torch's collector cannot free
    # `ctx.save_for_backward(out)` for `ctx.out = out`; `ctx.save_for_backward(...)` where the value
    # is no plain name or no tensor.
    save_call: str
    # The edits that save it instead (`ctx.save_for_backward(out)` in forward, `out, = ctx.saved_tensors`
    # in backward, or joining an existing call and unpacking); None where a use cannot be rewritten.
    save_instead: tuple[Change, ...] | None
    # Stored by another project module's def given ctx (`stash(ctx, x)`): the call and that def's
    # place; `node` is then the call, in this file.
    through: tuple[str, str | None] | None = None


def tensors_kept_on_ctx(model: FileModel) -> list[CtxStore]:
    """Each Function's ctx attribute stores of a tensor (or a container of them), in walk order."""
    found = []
    for function, walk in model.autograd_walks:
        several = keeps_several_outputs(walk)
        for store in walk.of(AttributeStore):
            if store.owner.kind is not Kind.CTX:
                continue
            kind = stored_kind(walk, store.value)
            if kind is None and store.value.kind is Kind.UNKNOWN and _used_as_tensor_in_backward(function, store.attribute):
                kind = TENSOR  # `out = x * w` says nothing of w (a float passes); `ctx.w.t()` does
            if kind is None:
                continue
            if kind == OUTPUT and _marked(walk, store.value):
                kind = TENSOR  # no grad_fn, no cycle: what is left is the version-counter check
            if kind in (OUTPUT, VIEW) and store.value.int64:
                # an integer output (argsort, topk indices) never requires grad: no grad_fn, no cycle
                kind = TENSOR
            # save_for_backward takes tensors only: `ctx.pair = (a, b)` would become a TypeError,
            # and so would `ctx.perm = perm` for a NumPy perm known only by `perm.shape`
            instead = _save_instead(function, walk, store) \
                if store.value.kind is Kind.TENSOR and store.through is None \
                and not _known_by_shape_only(model, walk, store) else None
            found.append(CtxStore(store.node, function.name, store.owner_name, store.attribute, kind,
                                  store.value.kind is Kind.CONTAINER, several, _save_call(store), instead,
                                  store.through))
    return found


def stored_kind(walk: Walk, value: Val) -> str | None:
    """What a ctx attribute holds: output, view (of the output), container (of the output),
    tensor (an input or intermediate), or None (not a tensor, or unknown)."""
    if value.kind not in (Kind.TENSOR, Kind.CONTAINER):
        return None
    if walk.is_output(value):
        return OUTPUT
    if walk.is_view_of_output(value):
        return VIEW
    if value.kind is Kind.CONTAINER:
        inner = [stored_kind(walk, m) for m in value.members()]
        if VIEW in inner:
            return VIEW
        if OUTPUT in inner or CONTAINER in inner:
            return CONTAINER
        # A forward input whose items are used as tensors (file_model.input_value).
        return TENSOR if TENSOR in inner or (value.is_input and not inner) else None
    return TENSOR if value.is_tensor else None


def keeps_several_outputs(walk: Walk) -> bool:
    """Whether ctx holds two or more outputs of one call (`ctx.a, ctx.b = a, b; return a, b`):
    then the outputs share the grad_fn node the cycle runs through, and torch 2.13's collector
    cannot free it (ground truth: one output on ctx is freed by gc.collect(), two are not)."""
    stored: set[int] = set()
    differentiable = walk.output_bindings - non_differentiable(walk)
    for store in walk.of(AttributeStore):
        if store.owner.kind is Kind.CTX:
            outputs = bindings_of(store.value) & differentiable
            if outputs and store.attribute == "<dynamic>" and store.where.loops:
                return True  # setattr(ctx, f"out{i}", out) over the outputs: one attribute each
            stored |= outputs
    if len(stored) < 2:
        return False
    if walk.role.kind != "forward":  # setup_context: `output` is one call's outputs
        return True
    return any(len(bindings_of(r.value) & stored) >= 2 for r in walk.of(ReturnValue))


def _marked(walk: Walk, value: Val) -> bool:
    return value.binding is not None and value.binding in non_differentiable(walk)


def _save_call(store: AttributeStore) -> str:
    """`ctx.save_for_backward(out)` for `ctx.out = out`; `(...)` where the value is no plain name
    or no tensor (save_for_backward takes tensors, not a list of them)."""
    node = store.where.node
    if store.value.kind is Kind.TENSOR and isinstance(node, cst.Assign) and len(node.targets) == 1 \
            and node.targets[0].target is store.target and isinstance(node.value, cst.Name):
        return f"{store.owner_name}.save_for_backward({node.value.value})"
    return f"{store.owner_name}.save_for_backward(...)"


def _known_by_shape_only(model: FileModel, walk: Walk, store: AttributeStore) -> bool:
    """`ctx.perm = perm` for a forward input read only as `.shape`/`.dtype`/...: a NumPy array too."""
    node = store.where.node
    value = node.value if isinstance(node, cst.Assign) else None
    if not isinstance(value, cst.Name) or not isinstance(walk.function, cst.FunctionDef):
        return False
    scan = model.prescan(walk.function)
    return value.value in scan.attribute_uses and value.value not in scan.tensor_uses


_TENSOR_ONLY_ATTRIBUTES = TENSOR_ATTRIBUTES - NUMPY_SHARED_ATTRIBUTES


def _used_as_tensor_in_backward(function: AutogradFunction, attribute: str) -> bool:
    """backward reads `ctx.<attribute>` as only a tensor is read: `.t()`, `.index_select(...)`,
    `.requires_grad` (not `.shape` or `.device`: a NumPy array, a generator or a config has them)."""
    backward = function.backward
    ctx = _first_param(backward) if backward is not None else None
    if ctx is None:
        return False
    for node in descendants(backward.body):
        if isinstance(node, cst.Attribute) and (node.attr.value in _TENSOR_ONLY_ATTRIBUTES or node.attr.value in TENSOR_PROOF_METHODS):
            inner = node.value
            if isinstance(inner, cst.Attribute) and inner.attr.value == attribute \
                    and isinstance(inner.value, cst.Name) and inner.value.value == ctx:
                return True
    return False


# ----- the fix ------------------------------------------------------------------------------
# `ctx.out = out` in forward and `ctx.out` in backward become `ctx.save_for_backward(out)` and
# `out, = ctx.saved_tensors`; a second attribute joins the existing call and unpacking in the next
# round of fixes. Offered only where every use of the attribute can be seen and rewritten.

_ASSIGNING = (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.With, cst.NamedExpr, cst.Del,
              cst.Import, cst.ImportFrom, cst.FunctionDef, cst.ClassDef)


def _names_used(node: cst.CSTNode) -> set[str]:
    """Variable names (not attribute names: `ctx.out` uses `ctx`, not `out`)."""
    attributes = {id(n.attr) for n in descendants(node) if isinstance(n, cst.Attribute)}
    return {n.value for n in descendants(node) if isinstance(n, cst.Name) and id(n) not in attributes}


def _binds(node: cst.CSTNode, name: str) -> bool:
    """Whether any statement inside `node` may rebind `name` (conservative: any binding form that
    mentions the name counts)."""
    return any(isinstance(n, _ASSIGNING) and name in _names_used(n) and not _only_reads(n, name)
               for n in descendants(node))


def _only_reads(node: cst.CSTNode, name: str) -> bool:
    if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        return not any(name in _names_used(t) and not isinstance(t, (cst.Attribute, cst.Subscript)) for t in targets)
    if isinstance(node, cst.For):
        return name not in _names_used(node.target)
    if isinstance(node, cst.With):
        return not any(item.asname is not None and name in _names_used(item.asname) for item in node.items)
    return False


def _ctx_attributes(node: cst.CSTNode, attribute: str) -> list[cst.Attribute]:
    return [n for n in descendants(node) if isinstance(n, cst.Attribute) and n.attr.value == attribute]


def _mentions_string(node: cst.CSTNode, text: str) -> bool:
    return any(isinstance(n, cst.SimpleString) and n.evaluated_value == text for n in descendants(node))


def _saved_tensors_unpacking(backward: cst.FunctionDef, ctx: str) -> tuple[cst.Assign, list[str]] | None:
    """`a, b = ctx.saved_tensors` directly in backward's body, with plain names."""
    for statement in backward.body.body:
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            continue
        assign = statement.body[0]
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and code(assign.value).strip() == f"{ctx}.saved_tensors":
            target = assign.targets[0].target
            if isinstance(target, (cst.Tuple, cst.List)) and all(isinstance(e, cst.Element) and isinstance(e.value, cst.Name)
                                                                   for e in target.elements):
                return assign, [e.value.value for e in target.elements]
            return None
    return None


def _first_param(function: cst.FunctionDef) -> str | None:
    params = function.params.params[leading_params(function):]
    return params[0].name.value if params else None


def _subclassed(model: FileModel, function: AutogradFunction) -> bool:
    """A Function of the file that inherits from this one: its own backward (or forward) reads
    what this forward saves, and the fix would not rewrite it (entmax's SparsemaxBisectFunction
    unpacks one saved tensor from EntmaxBisectFunction's forward)."""
    return any(other.name != function.name and function.name in model.ancestors(other.name)
               for other in model.function_classes)


def _save_instead(function: AutogradFunction, walk: Walk, store: AttributeStore) -> tuple[Change, ...] | None:
    saver = walk.function
    backward = function.backward
    if _subclassed(walk.model, function):
        return None
    assign = store.where.node
    if not (isinstance(function.node, cst.ClassDef) and isinstance(saver, cst.FunctionDef) and backward is not None
            and isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.targets[0].target is store.target
            and isinstance(store.target, cst.Attribute) and isinstance(backward.body, cst.IndentedBlock)):
        return None
    line = statement_in_body(saver.body, assign)
    backward_ctx = _first_param(backward)
    if line is None or backward_ctx is None:
        return None
    attribute, ctx = store.attribute, store.owner_name
    # Every other mention of the attribute must be a plain read in backward.
    reads = [a for a in _ctx_attributes(backward, attribute) if code(a.value).strip() == backward_ctx]
    others = [a for a in _ctx_attributes(function.node, attribute) if a is not store.target and a not in reads]
    if others or _mentions_string(function.node, attribute) or any(_binds_attribute(backward, a) for a in reads):
        return None
    local = next((n for n in (attribute, f"{attribute}_saved") if n.isidentifier() and not keyword.iskeyword(n)
                  and n not in _names_used(backward)), None)
    if local is None:
        return None
    calls = [e for e in walk.of(SavedForBackward)]
    mentions = [a for a in _ctx_attributes(function.node, "saved_tensors")]
    changes: list = [Replace(a, local) for a in reads]
    if not calls:
        if mentions:
            return None
        changes.append(Replace(assign, f"{ctx}.save_for_backward({code(assign.value).strip()})"))
        first = first_statement(backward)
        if first is None:
            return None
        changes.append(InsertLineAbove(first, f"{local}, = {backward_ctx}.saved_tensors"))
    else:
        merged = _merge(saver, line, assign, calls, backward, backward_ctx, local, mentions)
        if merged is None:
            return None
        changes.extend(merged)
    return tuple(changes)


def _binds_attribute(backward: cst.FunctionDef, attribute: cst.Attribute) -> bool:
    """`ctx.x = ...`, `ctx.x += ...`, `del ctx.x` in backward: not a read to rewrite."""
    for node in descendants(backward):
        if isinstance(node, cst.Assign) and any(t.target is attribute for t in node.targets):
            return True
        if isinstance(node, (cst.AugAssign, cst.AnnAssign)) and node.target is attribute:
            return True
        if isinstance(node, cst.Del) and attribute in set(descendants(node.target)):
            return True
    return False


def _merge(saver, line, assign, calls, backward, backward_ctx, local, mentions) -> list | None:
    """Join an existing `ctx.save_for_backward(a, b)` and `a, b = ctx.saved_tensors`: only when
    there is one of each, side by side in the two bodies, and the value is a name whose binding at
    the call is the one stored."""
    if len(calls) != 1 or not isinstance(assign.value, cst.Name):
        return None
    call = calls[0].where.node
    unpacking = _saved_tensors_unpacking(backward, backward_ctx)
    if unpacking is None or len(mentions) != 1 or not isinstance(call, cst.Call):
        return None
    unpack_assign, names = unpacking
    if len(names) != len(call.args) or any(a.keyword is not None or a.star for a in call.args):
        return None
    call_line = next((s for s in saver.body.body if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                      and isinstance(s.body[0], cst.Expr) and s.body[0].value is call), None)
    if call_line is None:
        return None
    body = list(saver.body.body)
    at_store, at_call = body.index(line), body.index(call_line)
    name = assign.value.value
    between = body[min(at_store, at_call) + 1:max(at_store, at_call)]
    if any(_binds(s, name) for s in between):
        return None
    if at_call < at_store:  # the call must already see this binding of the name
        params = {p.name.value for p in saver.params.params}
        if name not in params and not any(_binds(s, name) for s in body[:at_call]):
            return None
    arguments = [code(a.value).strip() for a in call.args] + [name]
    target = unpack_assign.targets[0].target
    new_target = ", ".join([*names, local])
    if isinstance(target, cst.List):  # a tuple's position excludes its parentheses, a list's includes its brackets
        new_target = f"[{new_target}]"
    return [
        Replace(call, f"{code(call.func).strip()}({', '.join(arguments)})"),
        DeleteLines(line),
        Replace(target, new_target),
    ]
