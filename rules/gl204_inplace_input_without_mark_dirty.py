from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from gradlint import prechecks
from gradlint import torch_api as api
from gradlint.call_sites import is_true, keyword
from gradlint.file_model import AutogradFunction, FileModel, blocks_of, leading_params, returns_in
from gradlint.findings import Severity
from gradlint.prescan import child_nodes, target_names
from gradlint.rule import Hit, Invalid, Rule
from gradlint.values import Kind


@dataclass(frozen=True)
class Mutation:
    node: cst.CSTNode
    param: str  # the forward input whose data changes
    via: str  # the name it is changed through: the input's own, an alias or a view of it
    # How sure the change is a tensor's: "call" (an in-place tensor method or torch function: any
    # input not known to be a scalar), "store" (`x[...] = v`: a list or dict takes that too, so the
    # input must be known to be a tensor), "augmented" (`x += v` on a name: on an int or float it
    # rebinds the name, so only an input used directly as a tensor or annotated as one counts).
    evidence: str


# Builtins that can be handed ctx without marking anything dirty.
_CTX_SAFE_BUILTINS = api.SCALAR_BUILTINS | {"setattr", "getattr", "delattr"}


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

    def __init__(self, model: FileModel, ctx: str | None, inputs: list[str]):
        self.model = model
        self.ctx = ctx
        self.mutations: list[Mutation] = []
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
                and expr.func.attr.value in api.ALWAYS_VIEW_METHODS:
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
            self.mutations.append(Mutation(call, param, via, "call"))

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
                self.mutations.append(Mutation(node, found[0], found[1], "store"))
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
                self.mutations.append(Mutation(node, live[node.target.value], node.target.value, "augmented"))
            else:
                self.stored(node.target, node, live)
        elif isinstance(node, cst.Del):
            for name in target_names(node.target):
                live.pop(name, None)
        else:
            for child in child_nodes(node):
                self.expression(child, live)


def _none_gradients(function: AutogradFunction) -> set[int]:
    """Input positions for which every return of backward is a literal None: inputs the author
    treats as non-differentiable (indices, running statistics, output buffers). mark_dirty is not
    the fix there, and a buffer updated in place is the point of such an input."""
    inputs = function.forward_inputs
    if inputs is None or function.backward is None:
        return set()
    returns = [r.value for r in returns_in(function.backward)]
    if not returns or any(r is None for r in returns):
        return set()
    found = set(range(len(inputs)))
    for value in returns:
        elements = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
        found &= {i for i, e in enumerate(elements) if isinstance(e, cst.Name) and e.value == "None"}
    return found


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

    def visit(node: cst.CSTNode) -> None:
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
            visit(child)

    visit(setup.body)
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


def _literal_index(subscript: cst.Subscript) -> int | None:
    if len(subscript.slice) == 1 and isinstance(subscript.slice[0].slice, cst.Index) \
            and isinstance(subscript.slice[0].slice.value, cst.Integer):
        return int(subscript.slice[0].slice.value.value)
    return None


class InplaceInputWithoutMarkDirty(Rule):
    code = "GL204"
    name = "inplace-input-without-mark-dirty"
    severity = Severity.ERROR
    summary = "a forward input changed in place without ctx.mark_dirty: no error, silently wrong gradients"
    markers = (("autograd", "def forward"),)
    doc = """
## What it does
Flags an in-place change to a forward input of an autograd Function (`x.add_(...)`, any in-place
tensor method, `x[...] = v`, `x += v`, `torch.relu_(x)`, `F.relu(x, inplace=True)`,
`torch.add(a, b, out=x)`, also through an alias or a view such as `x[:, :3]` or `x.view(-1)`)
when forward does not call `ctx.mark_dirty(x)` (for a `setup_context`-style Function: when
`setup_context` does not).

Not reported: an input rebound before the change (`x = x.clone()`), an input that is rebound on
some path before it, a parameter with no evidence that it is a tensor, an input for which every
`return` of backward gives `None` (an index, a running statistic or an output buffer, updated in
place on purpose), and in-place changes of metadata or autograd state only (`requires_grad_()`,
`detach_()`, `unsqueeze_()`, ...).

## Why is this bad?
Measured on torch 2.13: forward runs with grad mode off, so the change raises nothing and warns
nothing, even on a leaf that requires grad (outside forward the same call raises `a leaf Variable
that requires grad is being used in an in-place operation.`): the caller's tensor is silently
changed. Autograd still holds the input's old history, so:
- code that uses the input after the call gets silently wrong gradients: with `x = a * 1` and
  forward doing `x.mul_(2)` and returning `x`, `(out + x).sum().backward()` gives `a.grad == 3`
  where the values computed need 4 (4 with `mark_dirty`);
- if an op before the call saved the input, backward fails with `one of the variables needed for
  gradient computation has been modified by an inplace operation: [torch.FloatTensor [3]], which
  is output 0 of Mul, is at version 1; expected version 0 instead.`

`ctx.mark_dirty(x)` (with `x` returned) makes autograd move `x`'s history onto the Function's
node. On a leaf that requires grad torch then refuses the change (`a leaf Variable that requires
grad has been used in an in-place operation.`): work on a clone when the input can be a leaf.

## Example
```python
class ScaleInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.mul_(scale)
```

## Use instead
```python
class ScaleInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        ctx.mark_dirty(x)
        return x.mul_(scale)
```
"""
    VALID = (
        """
import torch
class ClampInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, lo, hi, inplace=False):
        ctx.lo, ctx.hi = lo, hi
        if inplace:
            ctx.mark_dirty(input)
            output = input.clamp_(lo, hi)
        else:
            output = input.clamp(lo, hi)
        return output
    @staticmethod
    def backward(ctx, g):
        return g, None, None, None
""",
        """
import torch
class Normalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps):
        x = x.clone()
        x.sub_(x.mean(0))
        x /= x.std(0) + eps
        y = torch.empty_like(x)
        torch.mul(x, 2, out=y)
        y[y < 0] = 0
        x.requires_grad_()
        return y
    @staticmethod
    def backward(ctx, g):
        return g, None
""",
        """
import torch
class Accumulate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, out, running_count):
        out.index_add_(0, index, src)
        running_count += torch.bincount(index, minlength=out.size(0))
        ctx.save_for_backward(index)
        return out.clone()
    @staticmethod
    def backward(ctx, g):
        index, = ctx.saved_tensors
        return g.index_select(0, index), None, None, None
""",
        """
import torch
class Centered(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xyz, training):
        if training:
            xyz = xyz.contiguous()
        xyz.sub_(xyz.mean(1, keepdim=True))
        steps = 0
        steps += 1
        return xyz
    @staticmethod
    def backward(ctx, g):
        return g, None
""",
        """
import torch
class Stash(torch.autograd.Function):
    @staticmethod
    def forward(x, buf):
        buf.copy_(x)
        x.add_(1)
        return x
    @staticmethod
    def setup_context(ctx, inputs, output):
        x, buf = inputs
        ctx.mark_dirty(x)
    @staticmethod
    def backward(ctx, g):
        return g, None
""",
        """
import torch
class Blend(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, names, weight):
        names[0] = "x"
        weight *= 0.5
        ctx.weight = float(weight)
        return x * weight
    @staticmethod
    def backward(ctx, g):
        return (g * ctx.weight,) + (None,) * 2
""",
    )
    INVALID = (
        Invalid("""
import torch
class MaskedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, valid):
        scores.masked_fill_(~valid, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        ctx.save_for_backward(probs)
        return probs
""", ("scores.masked_fill_(~valid, float(\"-inf\"))",)),
        Invalid("""
import torch
class ScaleInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.mul_(scale)
    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None
""", ("return x.mul_(scale)",)),
        Invalid("""
import torch
import torch.nn.functional as F
class GatedRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gate, bias, mask):
        h = x[:, :3]
        h[gate < 0] = 0
        x.add_(1)
        bias += 1
        F.relu(gate, inplace=True)
        torch.sigmoid(gate, out=gate)
        y = mask.view(-1)
        y.clamp_(min=0)
        ctx.save_for_backward(gate)
        return (x + bias.unsqueeze(0)) * gate * mask
    @staticmethod
    def backward(ctx, g):
        gate, = ctx.saved_tensors
        return g * gate, g, g, g
""", ("h[gate < 0] = 0", "bias += 1", "F.relu(gate, inplace=True)", "y.clamp_(min=0)")),
        Invalid("""
import torch
class Shift(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, offset: torch.Tensor):
        x.add_(offset)
        if offset.numel() > 1:
            offset = offset.clone()
        offset.zero_()
        return x * 1
    @staticmethod
    def setup_context(ctx, inputs, output):
        x, offset = inputs
        ctx.save_for_backward(offset)
    @staticmethod
    def backward(ctx, g):
        return g, g.sum()
""", ("x.add_(offset)",)),
    )

    def precheck(self, tree) -> bool:
        return prechecks.has_autograd_function(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for function, forward in model.distinct_methods("forward"):
            if function.style not in ("ctx", "setup_context"):
                continue
            signature = forward.params
            params = [*signature.posonly_params, *signature.params, *signature.kwonly_params][leading_params(forward):]
            ctx = None
            if function.style == "ctx":
                if not params:
                    continue
                ctx, params = params[0].name.value, params[1:]
            inputs = [p.name.value for p in params]
            scan = _ForwardScan(model, ctx, inputs)
            scan.block(forward.body.body, {name: name for name in inputs})
            if not scan.mutations or scan.dirty_unknown:
                continue
            dirty = scan.dirty if ctx is not None else _dirty_in_setup_context(model, function, inputs)
            skipped = {inputs[i] for i in _none_gradients(function) if i < len(inputs)}
            prescan = model.prescan(forward)
            # The same evidence the other rules use: a forward parameter is a tensor only when the
            # code treats it as one (annotation, tensor methods, torch.* arguments, arithmetic with one).
            kinds = {p.name.value: model.input_value(p, prescan).kind for p in params}
            direct = {p.name.value for p in params if p.name.value in prescan.tensor_uses or (
                p.annotation is not None and "Tensor" in model.module.code_for_node(p.annotation.annotation))}
            where = "setup_context" if ctx is None else "forward"
            reported: set[str] = set()
            for mutation in scan.mutations:
                param = mutation.param
                kind = kinds.get(param)
                if param in dirty or param in skipped or param in reported or kind is Kind.SCALAR:
                    continue
                if mutation.evidence == "store" and kind is not Kind.TENSOR:
                    continue
                if mutation.evidence == "augmented" and param not in direct:
                    continue
                reported.add(param)  # one mark_dirty (or one clone before the first change) fixes them all
                through = f" (through `{mutation.via}`)" if mutation.via != param else ""
                yield Hit(mutation.node, (
                    f"forward input `{param}` is changed in place{through} without ctx.mark_dirty({param}): "
                    "torch raises nothing, even on a leaf that requires grad, and the caller's tensor keeps its "
                    "old autograd history, so later uses of it get silently wrong gradients, or backward fails with "
                    "'one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation' when an earlier op saved it (measured, torch 2.13); call ctx.mark_dirty({param}) "
                    f"in {where} and return it, or change a clone"), subject=f"{function.name}.{param}")
