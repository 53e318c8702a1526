"""Walk one function's statements in order and record what the rules ask about.

The walker evaluates each expression to a `Val` (see values.py) and records *events*: a value
stored on an attribute, put into a container, bound to a name, saved for backward, returned.
Rules filter events; none of them walks syntax on its own. The walk is flow-insensitive where
that is conservative (both branches of an `if` are walked, the later binding wins) and a loop
body is walked once.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Iterator, Protocol

import libcst as cst

from gradlint import torch_api as api
from gradlint.annotations import annotated_value, isinstance_test, narrowed
from gradlint.names import ImportTable, code, dotted
from gradlint.prescan import Prescan, blocks_of, child_nodes, descendants, target_names
from gradlint.values import NONE, SCALAR, UNKNOWN, Kind, Val, combine, either, merge, new_binding, tensor, view


class FileFacts(Protocol):
    """What a walk asks of the file it walks (FileModel answers): flow evaluates expressions, the
    model knows the file's defs, classes and imports. Declared here so flow depends on no model."""

    imports: ImportTable
    functions: dict[str, cst.FunctionDef]
    module_names: set[str]
    module_class_names: set[str]
    function_class_names: set[str]
    plain_class_names: set[str]

    def prescan(self, function: cst.FunctionDef | cst.Module) -> Prescan: ...
    def names_in(self, node: cst.CSTNode) -> frozenset[str]: ...
    def loop_info(self, node: cst.For | cst.While, scan: Prescan) -> Any: ...
    def call_result(self, function: cst.FunctionDef, owner: Any, call: cst.Call | None, args: list,
                    receiver: Val | None, receiver_name: str | None, keep: Any = None) -> Val: ...
    def imported_call(self, qualified: str, args: list) -> Val | None: ...
    def compiled(self, name: str) -> cst.FunctionDef | None: ...
    def detaches(self, function: cst.FunctionDef) -> bool: ...
    def method_of(self, class_name: str, method: str) -> Any: ...
    def class_attribute(self, class_name: str, attribute: str) -> Val | None: ...
    def declared_value(self, annotation: cst.BaseExpression, value: Val = ...) -> Val: ...
    def global_value(self, name: str) -> Val: ...
    def stores_graph_on_self(self, module_class: str, attribute: str) -> bool: ...
    def forward_numbers(self, class_name: str) -> frozenset[int]: ...
    def returns_int64(self, name: str) -> bool: ...
    apply_aliases: dict[str, str]  # names bound to a Function's apply, to the Function


# A name that is almost always a module or a loss function in training code.
_MODULE_LIKE = re.compile(
    r"^(model|net|network|module|encoder|decoder|backbone|criterion|loss_fn|loss_func|lossfn|rnn|lstm|gru"
    r"|generator|discriminator|teacher|student|policy|actor|critic|unet|vae)$"
    r"|^net[A-Z]\w*$"  # netG, netD
    r"|^\w+_(model|net|network|encoder|decoder|backbone|rnn|lstm|gru)$"
    # the pairs of MoCo, GANs, EMA and distillation: encoder_q/encoder_k, net_g/net_d, model_ema
    r"|^(model|net|encoder|decoder|backbone)_(q|k|g|d|ema|student|teacher|online|target|momentum)$"
)
# `get_model`, `build_net`: functions that make a module, not modules.
_FACTORY_PREFIX = re.compile(r"^(get|make|build|create|load|init|setup|wrap|to|is|has)_")
# Forward parameters named like this hold Python scalars in practice (dim, k, eps, ...).
_SCALAR_LIKE = re.compile(
    r"^(dim|dims|axis|k|eps|alpha|beta|p|scale|reduce|reduction|mode|inplace|training|size|shape|"
    r"stride|padding|dilation|groups|kernel_size|dim_size|num_\w+|n_\w+|\w+_size|\w+_dim|\w+_dims|"
    r"\w+_shape|is_\w+|use_\w+|deterministic|chunk|chunks)$"
)


def looks_like_scalar(name: str) -> bool:
    """A name that holds a Python scalar in practice: a dim, a size, an option."""
    return bool(_SCALAR_LIKE.match(name))


def looks_like_module(name: str) -> bool:
    last = name.split(".")[-1]
    # A private factory is a factory too: `_build_model()` makes a module, it is not one.
    return bool(_MODULE_LIKE.search(last)) and not _FACTORY_PREFIX.match(last.lstrip("_"))


def _unset_attribute(test: cst.BaseExpression) -> str | None:
    """`self.cache is None` (its body runs where the attribute is unset), `not hasattr(self,
    "cache")`, `getattr(self, "cache", None) is None`: the attribute as `self.cache`; else None."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) \
            and isinstance(test.expression, cst.Call) and dotted(test.expression.func) == "hasattr":
        return _named_attribute(test.expression.args)
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 \
            or type(test.comparisons[0].operator) is not cst.Is \
            or not (isinstance(test.comparisons[0].comparator, cst.Name) and test.comparisons[0].comparator.value == "None"):
        return None
    left = test.left
    if isinstance(left, cst.Attribute):
        return dotted(left)
    if isinstance(left, cst.Call) and dotted(left.func) == "getattr" and len(left.args) == 3:
        return _named_attribute(left.args[:2])
    return None


def _named_attribute(args) -> str | None:
    """`(self, "cache")` as `self.cache`."""
    if len(args) != 2 or not isinstance(args[1].value, cst.SimpleString):
        return None
    owner = dotted(args[0].value)
    return f"{owner}.{args[1].value.evaluated_value}" if owner is not None else None


def _absent_key(test: cst.BaseExpression) -> tuple[bool, tuple[str | None, str]] | None:
    """`k not in c` (True: its body runs where the key is absent) or `k in c` (False: its else
    does), as (the container's dotted name, the key's code); None for any other test."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if type(target.operator) is cst.NotIn:
        absent = True
    elif type(target.operator) is cst.In:
        absent = False
    else:
        return None
    container = dotted(target.comparator)
    return (absent, (container, code(test.left))) if container is not None else None


@dataclass(frozen=True)
class Loop:
    node: cst.For | cst.While
    # Calls backward()/step()/zero_grad() or iterates a loader: one iteration is one step.
    is_step_loop: bool
    # Names created afresh inside the body (a container made here lives one iteration).
    fresh_names: frozenset[str]
    # Steps an environment (`env.step(action)`) and trains nothing: a rollout, one env step per
    # iteration; a graph kept from one to the next is kept for nothing unless backward uses it.
    is_rollout: bool = False
    # Holds a training loop of its own: its body outside that loop runs once per epoch.
    per_epoch: bool = False


@dataclass(frozen=True)
class Where:
    """Where an event happened: the statement, its loops, and whether grad mode was off."""

    node: cst.CSTNode
    loops: tuple[Loop, ...]
    no_grad: bool
    # Inside how many branches, handlers and loop bodies: 0 is a statement of the function's own
    # body that runs on every call (before any return).
    depth: int = 0


@dataclass(frozen=True)
class AttributeStore:
    where: Where
    owner: Val  # what the attribute is set on (Kind.CTX for ctx)
    owner_name: str  # `ctx`, `self`, `self.stats`, ...
    attribute: str
    value: Val
    augmented: bool = False  # `+=`
    target: cst.CSTNode | None = None  # the `ctx.x` being assigned (the call, for setattr)
    operand: Val | None = None  # `t = t + v` / `t = v + t`: what v is (for `+=`, value is v)
    # Made by another project module's def this call passes ctx to (`stash(ctx, x)`): the call
    # as written and that def's place (`stash`, `ops/helpers.py:1`); `where` is the call here.
    through: tuple[str, str | None] | None = None
    # Set only where the attribute is unset (`if self.cache is None: self.cache = v`): once.
    memo: bool = False

    @property
    def node(self) -> cst.CSTNode:
        return self.target if self.target is not None else self.where.node


@dataclass(frozen=True)
class NameStore:
    where: Where
    name: str
    scope: str  # local, global, closure, param
    value: Val  # the value stored (for `+=`: the right-hand side)
    augmented: bool = False
    chained: bool = False  # the new value reads the old one: `total = total + loss`
    operand: Val | None = None  # `t = t + v` / `t = v + t`: what v is (for `+=`, value is v)


@dataclass(frozen=True)
class ContainerAdd:
    where: Where
    container: cst.BaseExpression
    container_name: str | None
    scope: str  # local, global, closure, param, attribute, self-attribute
    method: str  # append, extend, insert, setitem, setdefault, update, +=
    value: Val
    overwrites: bool = False  # `d["last"] = v`, `buf[0] = v`: replaces one slot, does not grow
    through: str | None = None  # the helper of this file that adds to it: `keep(history, loss)`
    origin: cst.CSTNode | None = None  # and the helper's own statement that adds
    # A memo: stored only where the key is absent (`if k not in cache: cache[k] = v`,
    # `cache.setdefault(k, v)`), never replaced: one value per key, whatever the steps.
    memo: bool = False
    key: str | None = None  # `d[k] = v`: k's code, which a later `d.pop(k)` or `del d[k]` names
    # `d[k] = v` into what is known not to be a tensor (a list or dict bound in this file, or a
    # string key): a slot replaced, never a tensor written in place, which chains (CopySlices)
    not_tensor: bool = False


@dataclass(frozen=True)
class ContainerRemove:
    """`d.pop(k)`, `del d[k]` (key: k's code) or `d.clear()` (key None) on a container named so."""

    where: Where
    container_name: str
    key: str | None


@dataclass(frozen=True)
class KeptElsewhere:
    """A call of another project module's def or method that keeps what it is given where the
    call outlives it (`meter.update(loss)`, with `self.sum += value` in utils/meters.py): reported
    here, at the call, since the store's own line is in a file whose walks are not this one's."""

    where: Where  # the call, in this file
    callee: str  # `meter.update`, `remember`: the call as written
    receiver: str | None  # `meter`: what it is called on, when a method
    receiver_scope: str | None  # where the receiver lives (flow's scope_of), for a method
    self_name: str | None  # the method's own name for its self, as the store names it
    stored: "AttributeStore | ContainerAdd | NameStore"  # the store, in the other module's tree
    at: str | None  # `pkg/utils/meters.py:8`: the method or def, for the message


@dataclass(frozen=True)
class SavedForBackward:
    where: Where
    arguments: tuple[tuple[cst.BaseExpression, Val], ...]


@dataclass(frozen=True)
class MarkedNonDifferentiable:
    """`ctx.mark_non_differentiable(a, b)`: outputs with no grad_fn, so no cycle through ctx."""
    where: Where
    values: tuple[Val, ...]


@dataclass(frozen=True)
class ReturnValue:
    where: Where
    value: Val


@dataclass(frozen=True)
class FunctionApplied:
    """`MyFn.apply(a, [b, c])` for an autograd Function class of this file: what each argument is."""
    where: Where
    call: cst.Call
    function_name: str
    arguments: tuple[tuple[cst.Arg, Val], ...]


Event = AttributeStore | NameStore | ContainerAdd | SavedForBackward | MarkedNonDifferentiable | ReturnValue \
    | FunctionApplied | ContainerRemove


@dataclass
class FunctionRole:
    """How a function is walked: which parameter is ctx or self, what they stand for."""

    # forward / setup_context (of an autograd Function, ctx known), module_forward /
    # module_method (an nn.Module's), method, function, module (top-level code), init.
    kind: str
    ctx_name: str | None = None
    self_name: str | None = None
    self_attributes: dict[str, Val] = field(default_factory=dict)
    owner_class: str | None = None
    no_grad: bool = False


class Walk:
    """The events of one function walked under one role."""

    def __init__(self, model: FileFacts, function: cst.FunctionDef | cst.Module, role: FunctionRole):
        self.model = model
        self.function = function
        self.role = role
        self.events: list[Event] = []
        # Bindings that forward returns (or setup_context receives as `output`).
        self.output_bindings: set[int] = set()
        # Names the enclosing functions bind: what a nested function stores into them outlives it.
        self.closure_names: frozenset[str] = frozenset()
        # Walked for one call, with the caller's arguments (FileModel.call_result), not on its own.
        self.for_caller = False
        # Attributes set only where unset (AttributeStore.memo) and read after that in the walk:
        # a value later steps compute with (`x = self.cached`), which a working step cannot have
        # kept a graph in (its second backward would raise).
        self.memos_read: set[str] = set()

    def of(self, kind: type) -> Iterator:
        return (e for e in self.events if isinstance(e, kind))

    def made_afresh(self, owner: str, attribute: str, before: Event) -> bool:
        """Whether every call rebinds `owner.attribute` before the event, from a value that does
        not read its old one (`self.h_list = []` first in the method, `self.emb = self.lookup(x)`
        before it is updated), and the event is in no training loop of the method: what it holds
        lives one call, it chains nothing across calls (decoder state reset at the start of each
        forward)."""
        if any(loop.is_step_loop for loop in before.where.loops):
            return False  # reset once per call of a method that loops over the steps: per epoch
        target = f"{owner}.{attribute}"
        for event in self.events:
            if event is before:
                return False
            if isinstance(event, AttributeStore) and not event.augmented \
                    and (event.owner_name, event.attribute) == (owner, attribute) and target not in event.value.reads \
                    and (event.where.depth == 0 or _precedes_in_a_block(self.function, event.where.node, before.where.node)):
                return True
        return False

    def owner_made_afresh(self, owner: str, before: Event) -> bool:
        """Whether every call binds the local `owner` to what a call returns before the event
        (`output = self.model(**kwargs)`), in no training loop of the function: a new object each
        call, so what its attributes hold chains nothing across calls (an auxiliary loss added
        into the model output's own loss, `output.loss = output.loss + w * aux`, as peft's and
        MoE models do)."""
        if "." in owner or any(loop.is_step_loop for loop in before.where.loops):
            return False
        for event in self.events:
            if event is before:
                return False
            if isinstance(event, NameStore) and event.name == owner and event.scope == "local" \
                    and not event.augmented and not event.chained \
                    and isinstance(event.where.node, cst.Assign) and isinstance(event.where.node.value, cst.Call) \
                    and (event.where.depth == 0 or _precedes_in_a_block(self.function, event.where.node, before.where.node)):
                return True
        return False

    def removed_in_the_call(self, added: ContainerAdd) -> bool:
        """Whether what `added` stores by key is taken out again later in the same call, on every
        path from the store (same loops, in no branch of its own, no return between): DGL's
        `g.ndata["h"] = h; g.update_all(...); h = g.ndata.pop("h")` keeps nothing past the call."""
        if added.key is None or added.container_name is None:
            return False
        after = False
        for event in self.events:
            if event is added:
                after = True
            elif after and isinstance(event, ReturnValue):
                return False
            elif after and isinstance(event, ContainerRemove) and event.container_name == added.container_name \
                    and event.key in (added.key, None) and event.where.loops == added.where.loops \
                    and event.where.depth == len(event.where.loops):
                return True
        return False

    def is_output(self, v: Val) -> bool:
        return v.binding in self.output_bindings

    def is_view_of_output(self, v: Val) -> bool:
        return bool(v.view_of & self.output_bindings) and not self.is_output(v)


def _loop_info(node: cst.For | cst.While, scan: Prescan, names=None) -> Loop:
    """`names(node)`: the plain names under a node (FileModel.names_in reads each node once)."""
    iterable = node.iter if isinstance(node, cst.For) else node.test
    iter_text = code(iterable)
    fresh = _fresh_names(node.body.body, names=names or (lambda n: {x.value for x in _names_in(n)}))
    if isinstance(node, cst.For):
        fresh |= set(target_names(node.target))
    fresh -= scan.declared_global | scan.declared_nonlocal
    step = id(node) in scan.step_loops or bool(api.TRAINING_ITERABLE.search(iter_text))
    return Loop(node=node, is_step_loop=step, fresh_names=frozenset(fresh),
                is_rollout=not step and id(node) in scan.rollout_loops, per_epoch=id(node) in scan.epoch_loops)


def _fresh_names(statements, read: set[str] | None = None, leaving: bool = False, names=None) -> set[str]:
    """Names every iteration binds anew: assigned unconditionally in the loop body, not from
    their own old value. `total = total + loss` and a periodic reset under an `if` both leave
    `total` carrying values from one iteration to the next; so does a reset that a `continue`
    before it (or an exception in its `try`) can skip, once the body has read the old value.
    (`if bad: continue` then `outs = []` still makes `outs` anew before any use.)"""
    read = set() if read is None else read
    names = names or (lambda n: {x.value for x in _names_in(n)})
    fresh: set[str] = set()
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    value_reads = names(small.value)
                    for target in small.targets:
                        fresh.update(n for n in target_names(target.target)
                                     if n not in value_reads and not (leaving and n in read))
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    fresh.update(n for n in target_names(small.target) if not (leaving and n in read))
        elif isinstance(statement, cst.With):
            fresh |= _fresh_names(statement.body.body, read, leaving, names)
            for item in statement.items:
                if item.asname is not None:
                    fresh.update(target_names(item.asname.name))
        elif isinstance(statement, (cst.Try, cst.TryStar)):
            fresh |= _fresh_names(statement.body.body, read, True, names)
        elif isinstance(statement, cst.If):
            # Bound anew on every branch, an else included: spikingjelly's `out_fr = 0.0` both
            # under `with amp.autocast():` and without it.
            branches, branch = [], statement
            while isinstance(branch, cst.If):
                branches.append(branch.body.body)
                branch = branch.orelse
            if branch is not None:
                branches.append(branch.body.body)
                fresh |= set.intersection(*(_fresh_names(b, set(read), leaving, names) for b in branches))
        read.update(names(statement))
        leaving = leaving or may_leave_the_iteration(statement)
    return fresh


def _join(before: dict[str, Val], body: dict[str, Val], orelse: dict[str, Val]) -> dict[str, Val]:
    """What names hold after an `if`: what a branch bound (the else branch's when both did, as
    if walked one after the other), except that a tensor on one path and None on the other is a
    tensor or None (`x = t` / `x = None`): save_for_backward takes None too."""
    joined = dict(orelse)
    for name, value in body.items():
        other = orelse.get(name)
        old = before.get(name)
        if other is None or other is old:
            joined[name] = value
        elif value is not old and value is not other:
            joined[name] = either(value, other)
    return joined


def _precedes_in_a_block(function: cst.FunctionDef | cst.Module, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether `first` and `second` (statements, or the small statements of a line) are in one
    block of the function, `first` earlier: every path that reaches `second` ran `first`
    (avalanche's `else: self.res = {}; self.res["logits"] = ...`)."""
    todo = [function.body.body if isinstance(function, cst.FunctionDef) else function.body]
    while todo:
        block = todo.pop()
        at: dict[int, int] = {}
        for index, statement in enumerate(block):
            at[id(statement)] = index
            if isinstance(statement, cst.SimpleStatementLine):
                at.update((id(small), index) for small in statement.body)
            elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                todo.extend(blocks_of(statement))
        if id(first) in at and id(second) in at:
            return at[id(first)] < at[id(second)]
    return False


def may_leave_the_iteration(statement: cst.CSTNode) -> bool:
    """A `continue`, `break` or `return` in it that ends this iteration (not one of an inner loop's)."""
    stack = [statement]
    while stack:  # exact types, once per node (Walker._ev says why)
        node = stack.pop()
        kind = type(node)
        if kind is cst.Return or kind is cst.Continue or kind is cst.Break:
            return True
        if kind is cst.FunctionDef or kind is cst.ClassDef or kind is cst.Lambda:
            continue
        if kind is cst.For or kind is cst.While:  # its continue/break are its own; a return is not
            stack.extend(n for n in descendants(node) if type(n) is cst.Return)
            continue
        stack.extend(child_nodes(node))
    return False


# What Walker._ev reads by exact type: literals (a Python value), comprehensions.
_LITERALS = frozenset({cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                       cst.FormattedString, cst.Ellipsis})
_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp})
_BOOL_COMPARISONS = (cst.Is, cst.IsNot, cst.In, cst.NotIn)

# What a fix may rely on of a tensor (Val.assumed, Val.one_element): methods the other things a
# module returns have too (a tuple, a dict or ModelOutput, a number, a string, None) prove nothing.
_NOT_TENSOR_ONLY = frozenset(m for t in (tuple, list, dict, float, int, bool, str, type(None))
                             for m in dir(t) if not m.startswith("_"))
# `loss.mean()`, `x.sum()`: with no dim, one element.
_FULL_REDUCTIONS = frozenset({"sum", "mean", "prod", "norm", "max", "min", "amax", "amin", "median", "nanmean",
                              "nansum", "std", "var"})
# Elementwise, or a move: as many elements as the receiver; those of _ELEMENTWISE_WITH only with
# numbers (or one-element tensors) as the other operand.
_KEEPS_ELEMENTS = frozenset({"abs", "neg", "exp", "log", "log1p", "sqrt", "rsqrt", "sigmoid", "tanh", "relu",
                             "square", "reciprocal", "float", "double", "half", "bfloat16", "clone", "cpu", "cuda",
                             "to", "contiguous", "squeeze", "detach", "type_as"})
_ELEMENTWISE_WITH = frozenset({"pow", "mul", "div", "add", "sub", "clamp", "clip", "true_divide", "multiply",
                               "divide", "subtract", "clamp_min", "clamp_max"})
_DISTRIBUTION_TENSORS = frozenset({"log_prob", "entropy", "rsample", "cdf", "icdf", "perplexity"})
# torch.nn.functional's losses and how many positional arguments leave the reduction alone
# (`F.mse_loss(x, y, size_average)` is the deprecated flags; the reduction is a keyword).
_LOSS_FUNCTIONS = {
    **dict.fromkeys(("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "soft_margin_loss",
                     "multilabel_soft_margin_loss", "poisson_nll_loss", "hinge_embedding_loss",
                     "multilabel_margin_loss", "multi_margin_loss"), 2),
    **dict.fromkeys(("cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
                     "cosine_embedding_loss", "margin_ranking_loss", "triplet_margin_loss", "gaussian_nll_loss"), 3),
    "ctc_loss": 4,
}
# torch.nn's loss modules and how many positional arguments their constructor may take (a weight).
_LOSS_MODULES = {
    **dict.fromkeys(("MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "KLDivLoss", "SoftMarginLoss",
                     "MultiLabelSoftMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss", "CosineEmbeddingLoss",
                     "MarginRankingLoss", "HingeEmbeddingLoss", "TripletMarginLoss", "MultiMarginLoss",
                     "MultiLabelMarginLoss", "CTCLoss"), 0),
    **dict.fromkeys(("CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"), 1),
}
_REDUCING = frozenset({"mean", "sum", "batchmean"})


def _reduction_kept(args) -> bool:
    """No `reduction=` other than a literal mean/sum, and none of the deprecated flags."""
    for arg, _ in args:
        if arg.keyword is None:
            continue
        if arg.keyword.value in ("reduce", "size_average"):
            return False
        if arg.keyword.value == "reduction" and not (
                isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value in _REDUCING):
            return False
    return not any(arg.star for arg, _ in args)


def _loss_module(name: str, args) -> bool:
    """`nn.CrossEntropyLoss()`: a module whose output has one element."""
    allowed = _LOSS_MODULES.get(name.rsplit(".", 1)[-1])
    positional = [a for a, _ in args if a.keyword is None]
    return allowed is not None and len(positional) <= allowed and _reduction_kept(args)


def _reduces_fully(name: str, args, positional, keywords) -> bool:
    """`F.cross_entropy(logits, y)`, `torch.mean(x)`: one element."""
    last = name.rsplit(".", 1)[-1]
    if name.startswith("torch.nn.functional.") and last in _LOSS_FUNCTIONS:
        return len(positional) <= _LOSS_FUNCTIONS[last] and _reduction_kept(args)
    return name == f"torch.{last}" and last in _FULL_REDUCTIONS and len(positional) == 1 \
        and set(keywords) <= {"dtype"} and not any(a.star for a, _ in args)

# A helper named for it: `repackage_hidden(h)`, `detach_state(s)`.
_DETACHING_NAME = re.compile(r"detach|repackage", re.IGNORECASE)
DETACHED = Val(Kind.TENSOR)  # known graph-free: what .detach() or a detaching helper gives


def _new_tensor(int64: bool, keywords: dict) -> Val:
    """`x.new_zeros(n)`, `torch.zeros_like(x)`: a new leaf with no graph of x's; one made with
    `requires_grad=True` is graph-free as a parameter is, until an op uses it."""
    asked = keywords.get("requires_grad")
    requires_grad = asked is not None and isinstance(asked[0], cst.Name) and asked[0].value == "True"
    return Val(Kind.TENSOR, int64=int64, param=requires_grad)


def _detaches(function: cst.FunctionDef) -> bool:
    """A local helper that calls .detach() (the word-language-model's repackage_hidden)."""
    return bool(_DETACHING_NAME.search(function.name.value)) or any(
        isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "detach"
        for n in descendants(function.body))


def _names_in(expr: cst.CSTNode) -> Iterator[cst.Name]:
    """The Name nodes under a node (nested defs included), by plain attribute reads."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if type(node) is cst.Name:
            yield node
        else:
            stack.extend(child_nodes(node))


def _int_literal(expr: cst.BaseExpression, depth: int = 0) -> int | None:
    """The value of an integer literal expression (`-1`, `2**32`, `1 << 32`, `2**32 - 1`), or None."""
    if depth > 8:
        return None
    if isinstance(expr, cst.Integer):
        try:
            return int(expr.value.replace("_", ""), 0)
        except ValueError:
            return None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = _int_literal(expr.expression, depth + 1)
        return -inner if inner is not None else None
    if isinstance(expr, cst.BinaryOperation):
        left, right = _int_literal(expr.left, depth + 1), _int_literal(expr.right, depth + 1)
        if left is None or right is None:
            return None
        operator = type(expr.operator)
        # Bounded: a file of nested `((2**128)**128)**...` must not make a number of gigabytes.
        if operator is cst.Power and 0 <= right and abs(left).bit_length() * right <= 4096:
            return left ** right
        if operator is cst.LeftShift and 0 <= right <= 4096 - abs(left).bit_length():
            return left << right
        if operator is cst.Multiply and abs(left).bit_length() + abs(right).bit_length() <= 4096:
            return left * right
        if operator is cst.Add:
            return left + right
        if operator is cst.Subtract:
            return left - right
    return None


@dataclass
class _Iteration:
    """One pass through a loop body, or one call of the function: what decides whether a store
    chains one step onto the next (`hidden = model(x, hidden)`) or not (`hidden = hidden.detach()`
    first in the same pass, or last before the next one)."""

    loop: Loop | None  # None: the function's body
    depth: int  # the Walker's condition depth of the body's own statements
    # Names (and `self.x`) bound unconditionally earlier in this pass: reading one reads this
    # pass's value, not the previous pass's.
    fresh: set[str] = field(default_factory=set)
    # Whether what a name holds at the end of the pass (what the next pass reads) is known to be
    # graph-free, and how many events there were when it last became so.
    clean_at_end: dict[str, bool] = field(default_factory=dict)
    clean_since: dict[str, int] = field(default_factory=dict)
    exits: list[int] = field(default_factory=list)  # event counts at each continue/break/return
    # The branches open in this pass, innermost last, with the names each has bound so far.
    branches: list[set[str]] = field(default_factory=list)


def helper_arguments(function: cst.FunctionDef, args, tensor_uses: set[str]) -> dict[str, Val]:
    """A ctx helper's parameters bound to a call's arguments (`_stash(ctx, out)`): by position,
    then by keyword; what the caller could not tell, the helper's own use may (`edge_index.size(1)`
    in it makes edge_index a tensor). The same for a helper of this file and of another module."""
    params = [p.name.value for p in function.params.params]
    bound: dict[str, Val] = {p: UNKNOWN for p in params}
    for (arg, value), param in zip([(a, v) for a, v in args if a.keyword is None and a.star == ""], params):
        bound[param] = value
    for arg, value in args:
        if arg.keyword is not None and arg.keyword.value in bound:
            bound[arg.keyword.value] = value
    bound.update({p: Val(Kind.TENSOR) for p, v in bound.items() if v.kind is Kind.UNKNOWN and p in tensor_uses})
    return bound


def foreign_arguments(args: list) -> list:
    """A call's (arg, value) pairs as the called def's module reads them: a value naming one of the
    caller's classes (module_class) would be looked up in the wrong module, so it names none."""
    return [(arg, value.with_(module_class=None) if value.module_class else value) for arg, value in args]


def walk_called(model, function: cst.FunctionDef, args: list, walker: type[Walker] | None = None) -> Walker:
    """`function` (a def of `model`'s module) walked as a plain function, its parameters bound to
    a call's arguments (foreign_arguments, helper_arguments); the walker, run, holds its Walk."""
    bound = helper_arguments(function, foreign_arguments(args), model.prescan(function).tensor_uses)
    run = (walker or Walker)(Walk(model, function, FunctionRole("function")), function)
    run.bind_params(bound)
    run.run()
    return run


def _graph_free(value: Val) -> Val:
    """What computing `value` under no_grad gives: no graph, nor in the elements of a container
    (a method walked elsewhere returns `action, logprob, entropy, value`)."""
    if value.kind is not Kind.CONTAINER:
        return value.with_(graph=False)
    return value.with_(graph=False, elements=tuple(_graph_free(e) for e in value.elements),
                       item=_graph_free(value.item) if value.item is not None else None)


def disables_grad(expr: cst.BaseExpression, imports: ImportTable) -> bool:
    """Whether a `with` item turns grad off: `torch.no_grad()`, `torch.inference_mode()`,
    `torch.set_grad_enabled(False)`."""
    call = expr if isinstance(expr, cst.Call) else None
    name = imports.qualify(call.func if call else expr)
    if name in api.NO_GRAD_CONTEXTS:
        return True
    if name in api.SET_GRAD_ENABLED and call and call.args:
        first = call.args[0].value
        return isinstance(first, cst.Name) and first.value == "False"
    return False


class Walker:
    """Evaluates one function body under a role and appends events to a `Walk`."""

    MAX_CALL_DEPTH = 3
    MAX_REWALKS = 2  # nested loops walked again at most this deep (each costs one more pass)

    def __init__(
        self,
        walk: Walk,
        function: cst.FunctionDef | cst.Module,
        env: dict[str, Val] | None = None,
        depth: int = 0,
        enclosing: dict[str, Val] | None = None,
        nested_defs: dict[str, cst.FunctionDef] | None = None,
    ):
        self.walk = walk
        self.model = walk.model
        self.role = walk.role
        self.function = function
        self.env: dict[str, Val] = dict(env or {})
        self.enclosing = enclosing or {}
        self.depth = depth
        self.loops: list[Loop] = []
        self.no_grad = walk.role.no_grad
        self.nested_defs: dict[str, cst.FunctionDef] = dict(nested_defs or {})
        self.scan = walk.model.prescan(function)
        self.params: set[str] = set()
        self._condition_depth = 0  # inside how many if/except/case/loop bodies
        self._absent: list[tuple[str | None, str]] = []  # (container, key) an enclosing `if k not in c` tests
        self._unset: list[str] = []  # attributes an enclosing `if self.x is None` tests
        self._memos: set[str] = set()  # attributes this walk set where they were unset
        self._testing: str | None = None  # the memo an `if` test being read checks
        self._passes: list[_Iteration] = [_Iteration(None, 0)]
        self._rewalks = 0
        self._sums: dict[int, tuple[Val, Val]] = {}  # `a + b` -> what a and b are (see _operand)

    # ----- entry points ---------------------------------------------------------------------

    def run(self) -> None:
        start = len(self.walk.events)
        if isinstance(self.function, cst.Module):
            self._block(self.function.body)
        else:
            self._block(self.function.body.body)
        self._unchain_cut(self._passes[0], start)

    def bind_params(self, values: dict[str, Val]) -> None:
        for name, value in values.items():
            self.params.add(name)
            self.env[name] = value if value.binding is not None else value.with_(binding=new_binding())

    # ----- statements -----------------------------------------------------------------------

    def _block(self, statements) -> None:
        for statement in statements:
            self._statement(statement)

    def _statement(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self._small(small)
        elif isinstance(node, cst.If):
            unset = _unset_attribute(node.test)
            self._testing = unset  # the test's own read of a memo (a loop walked again) is no use of it
            try:
                self.ev(node.test)
            finally:
                self._testing = None
            test = isinstance_test(node.test, self.model.imports)
            before = dict(self.env)
            absent = _absent_key(node.test)
            with self._narrowing(test, True):
                if absent is not None and absent[0]:
                    self._absent.append(absent[1])
                if unset is not None:
                    self._unset.append(unset)
                try:
                    in_body = self._conditional(node.body.body)
                finally:
                    if absent is not None and absent[0]:
                        self._absent.pop()
                    if unset is not None:
                        self._unset.pop()
            after_body, self.env = self.env, dict(before)  # the else branch does not see the body's bindings
            orelse = node.orelse
            in_orelse: set[str] = set()
            with self._narrowing(test, False):
                if absent is not None and not absent[0]:  # `if k in cache: ... else: cache[k] = v`
                    self._absent.append(absent[1])
                try:
                    if isinstance(orelse, cst.If):
                        in_orelse = self._conditional([orelse])
                    elif orelse is not None:
                        in_orelse = self._conditional(orelse.body.body)
                finally:
                    if absent is not None and not absent[0]:
                        self._absent.pop()
            self.env = _join(before, after_body, self.env)
            if orelse is not None:
                # bound on both paths: after the `if`, a name read in this pass reads this pass's value
                self._bound_here(in_body & in_orelse)
        elif isinstance(node, (cst.For, cst.While)):
            self._loop(node)
        elif isinstance(node, cst.With):
            self._with(node)
        elif isinstance(node, (cst.Try, cst.TryStar)):
            self._block(node.body.body)
            for handler in node.handlers:
                self._conditional(handler.body.body)
            if node.orelse is not None:
                self._conditional(node.orelse.body.body)
            if node.finalbody is not None:
                self._block(node.finalbody.body.body)
        elif isinstance(node, cst.FunctionDef):
            self.nested_defs[node.name.value] = node
        elif isinstance(node, cst.Match):
            self.ev(node.subject)
            for case in node.cases:
                self._conditional(case.body.body)
        elif isinstance(node, cst.IndentedBlock):
            self._block(node.body)

    def _small(self, node: cst.BaseSmallStatement) -> None:
        line = node  # findings point at the statement itself, not its whole line
        if isinstance(node, cst.Assign):
            value = self.ev(node.value)
            for target in node.targets:
                self._bind(target.target, value, line, self._operand(node))
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                value = self.ev(node.value)
                if value.kind is Kind.UNKNOWN:  # `A_val: torch.Tensor = args[0]`: the annotation says it
                    value = self.model.declared_value(node.annotation.annotation, value)
                self._bind(node.target, value, line)
        elif isinstance(node, cst.AugAssign):
            self._augmented(node, line)
        elif isinstance(node, cst.Expr):
            self.ev(node.value)
            self._detached_in_place(node.value, line)
        elif isinstance(node, cst.Del):
            self._deleted(node.target, line)
        elif isinstance(node, cst.Return):
            value = self.ev(node.value) if node.value is not None else SCALAR
            self.walk.events.append(ReturnValue(self._where(line), value))
            for each in self._passes:
                each.exits.append(len(self.walk.events))
        elif isinstance(node, (cst.Continue, cst.Break)):
            self._passes[-1].exits.append(len(self.walk.events))
        elif isinstance(node, (cst.Raise, cst.Assert)):
            for child in node.children:
                if isinstance(child, cst.BaseExpression):
                    self.ev(child)

    def _detached_in_place(self, expr: cst.BaseExpression, line: cst.CSTNode) -> None:
        """`state.detach_()`, `hidden[0].detach_()` as a statement: the tensors the name holds are
        cut from their graph in place, a store of a graph-free value into the name (what a reset
        of a carried state is). Measured on torch 2.13 (an LSTM's `(h, c)` with `hidden[0].detach_()`
        and `hidden[1].detach_()` before each step, a GRUCell's state with `state.detach_()`): no
        grad_fn after it, and the graph each new state reaches stays 6 and 20 nodes over 5 steps.
        One item detached stands for the whole tuple (precision first: the other may still chain)."""
        if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
                and expr.func.attr.value == "detach_" and not expr.args):
            return
        root = expr.func.value
        while isinstance(root, cst.Subscript):
            root = root.value
        if not isinstance(root, cst.Name) or root.value not in self.env:
            return
        name = root.value
        value = _graph_free(self.env[name]).with_(reads=frozenset())  # nothing chains through it now
        self.env[name] = value
        self._note_binding(name, value)  # read later in this pass: this value, not the last pass's
        self.walk.events.append(NameStore(self._where(line), name, self.scope_of(name), value))

    @contextlib.contextmanager
    def _narrowing(self, test: tuple[str, cst.BaseExpression, bool, cst.BaseExpression] | None, branch: bool):
        """Inside `if isinstance(k, int):` k is an int; after the `if`, what it was (unless the
        branch rebound it)."""
        name = test[0] if test is not None else None
        had = name is not None and name in self.env
        before = self.env.get(name) if had else None
        if before is None and name is not None and "." in name:
            before = self.ev(test[3])  # `inp.attn_bias`: read it as the branch would
        inside = narrowed(before, test[1], test[2] == branch, self.model.imports) \
            if test is not None and before is not None else None
        if inside is None:
            yield
            return
        self.env[name] = inside
        try:
            yield
        finally:
            if self.env.get(name) is inside:
                if had:
                    self.env[name] = before
                else:
                    del self.env[name]

    def _conditional(self, statements) -> set[str]:
        """Walk a block that may not run (a branch, a handler, a case); returns the names it binds
        on its every path. Within it, a name it has bound reads the branch's value: `else: hidden =
        detach(hidden); out, hidden = model(x, hidden)` chains no step onto the next."""
        this_pass = self._passes[-1]
        this_pass.branches.append(set())
        self._condition_depth += 1
        try:
            self._block(statements)
        finally:
            self._condition_depth -= 1
            bound = this_pass.branches.pop()
        return bound

    def _bound_here(self, names: set[str]) -> None:
        this_pass = self._passes[-1]
        if this_pass.branches:
            this_pass.branches[-1] |= names
        elif self._condition_depth == this_pass.depth:
            this_pass.fresh |= names

    def _loop(self, node: cst.For | cst.While) -> None:
        loop = self.model.loop_info(node, self.scan)
        iterable = self.ev(node.iter if isinstance(node, cst.For) else node.test)
        self.loops.append(loop)
        self._condition_depth += 1
        before = dict(self.env)
        start = len(self.walk.events)
        this_pass = self._loop_pass(node, loop, iterable)
        # The first pass ran with what the names held before the loop. A name the body reads that
        # comes back graph-attached (`x = self.layers[i](x)`) holds a graph in every later pass:
        # walk the body again from there, and keep that pass's events.
        # (A tensor the body writes through an alias, `ret = obj if k else eff; ret[i] = h`, is
        # the alias's tensor: the same binding.)
        named = self.model.names_in(node.body)
        written = {self.env[name].binding for name in named if name in self.env} - {None}
        grown = {name for name, value in self.env.items() if value.holds_graph()
                 and not (before.get(name) or UNKNOWN).holds_graph() and (name in named or value.binding in written)}
        if grown and self._rewalks < self.MAX_REWALKS:
            del self.walk.events[start:]
            self.env = {**before, **{name: self.env[name] for name in grown}}
            self._rewalks += 1
            try:
                this_pass = self._loop_pass(node, loop, iterable)
            finally:
                self._rewalks -= 1
        self._unchain_cut(this_pass, start)
        self._condition_depth -= 1
        self.loops.pop()
        if node.orelse is not None:
            self._conditional(node.orelse.body.body)

    def _loop_pass(self, node: cst.For | cst.While, loop: Loop, iterable: Val) -> _Iteration:
        this_pass = _Iteration(loop, self._condition_depth)
        self._passes.append(this_pass)
        try:
            if isinstance(node, cst.For):
                self._bind(node.target, iterable.element(None), None)
            self._block(node.body.body)
        finally:
            self._passes.pop()
        return this_pass

    # ----- what one pass carries to the next --------------------------------------------------

    def _note_binding(self, name: str, value: Val) -> None:
        graph = value.holds_graph()
        this_pass = self._passes[-1]
        if self._condition_depth == this_pass.depth:
            this_pass.fresh.add(name)
            # An unknown function's result may still hold the graph (`carry_over(hidden)`).
            this_pass.clean_at_end[name] = not graph and value.kind is not Kind.UNKNOWN
            this_pass.clean_since[name] = len(self.walk.events)
        else:
            if this_pass.branches:
                this_pass.branches[-1].add(name)
            if graph:
                this_pass.clean_at_end[name] = False
        if graph:  # an inner loop or branch may run: the outer passes may end holding it
            for outer in self._passes[:-1]:
                outer.clean_at_end[name] = False

    def _read(self, name: str, value: Val) -> Val:
        """What reading `name` gives: a value bound earlier in this pass chains nothing by its
        name, only by what it was computed from."""
        this_pass = self._passes[-1]
        if name in this_pass.fresh or any(name in branch for branch in this_pass.branches):
            return value
        return value.with_(reads=value.reads | {name})

    def _unchain_cut(self, this_pass: _Iteration, start: int) -> None:
        """A store that reads its target's previous value does not chain steps when the pass
        ends by rebinding the target to something graph-free (`hidden = hidden.detach()` last):
        the next pass reads that, not the graph-attached value."""
        events = self.walk.events
        for i in range(start, len(events)):
            event = events[i]
            innermost = event.where.loops[-1] if event.where.loops else None
            if innermost is not this_pass.loop:
                continue
            if isinstance(event, NameStore) and event.chained and not event.augmented \
                    and self._cut_after(this_pass, event.name, i):
                events[i] = replace(event, chained=False)
            elif isinstance(event, AttributeStore) and not event.augmented:
                target = f"{event.owner_name}.{event.attribute}"
                if target in event.value.reads and self._cut_after(this_pass, target, i):
                    events[i] = replace(event, value=event.value.with_(reads=event.value.reads - {target}))

    @staticmethod
    def _cut_after(this_pass: _Iteration, name: str, index: int) -> bool:
        """Whether every way out of the pass after event `index` goes through a graph-free rebinding
        of `name`: a `continue` between the two carries the graph into the next pass."""
        if not this_pass.clean_at_end.get(name):
            return False
        since = this_pass.clean_since[name]
        return since > index and not any(index < exit_at <= since for exit_at in this_pass.exits)

    def _with(self, node: cst.With) -> None:
        saved = self.no_grad
        for item in node.items:
            if self._disables_grad(item.item):
                self.no_grad = True
            value = self.ev(item.item)
            if item.asname is not None:
                self._bind(item.asname.name, value if value.kind is Kind.MODULE else UNKNOWN, None)
        self._block(node.body.body)
        self.no_grad = saved

    def _disables_grad(self, expr: cst.BaseExpression) -> bool:
        return disables_grad(expr, self.model.imports)

    # ----- binding --------------------------------------------------------------------------

    def _where(self, node: cst.CSTNode) -> Where:
        return Where(node=node, loops=tuple(self.loops), no_grad=self.no_grad, depth=self._condition_depth)

    def scope_of(self, name: str) -> str:
        if name in self.scan.declared_global:
            return "global"
        if name in self.scan.declared_nonlocal:
            return "closure"
        if name in self.params:
            return "param"
        if name in self.scan.assigned or name in self.scan.augmented:
            return "local"
        if name in self.enclosing or name in self.walk.closure_names:
            return "closure"
        if isinstance(self.function, cst.Module):
            return "local"
        if name in self.model.module_names:
            return "global"
        return "unknown"

    def _operand(self, node: cst.Assign) -> Val | None:
        """`total = total + loss` (or `loss + total`): what the added `loss` is."""
        pair = self._sums.get(id(node.value))
        if pair is None or len(node.targets) != 1:
            return None
        target = node.targets[0].target
        for side, other in ((node.value.left, pair[1]), (node.value.right, pair[0])):
            if type(side) is type(target) and code(side).strip() == code(target).strip():
                return other
        return None

    def _bind(self, target: cst.BaseExpression, value: Val, line: cst.CSTNode | None,
              operand: Val | None = None) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            if name in self.scan.backward_roots and not self.no_grad and value.kind in (Kind.TENSOR, Kind.UNKNOWN):
                # (what backward's receiver reads: `torch.stack(losses)` reads a list)
                value = value.with_(kind=Kind.TENSOR, graph=True, assumed=value.assumed or value.kind is Kind.UNKNOWN)
            elif name in self.scan.frozen and value.kind is Kind.MODULE:
                value = UNKNOWN  # `teacher.requires_grad_(False)`: its outputs carry no graph of their own
            elif name in self.scan.module_uses and value.kind is Kind.UNKNOWN:
                value = value.with_(kind=Kind.MODULE)  # `netG = build(cfg)`, then `netG.parameters()`
            if self.role.kind == "forward" and value.kind is Kind.UNKNOWN and (
                    (name in self.scan.single_returns and name not in self.scan.tuple_sources)
                    or name in self.scan.returned_items):  # `event_t, y = ans; return ans`: ans is a tuple
                value = value.with_(kind=Kind.TENSOR)
            if value.binding is None:
                value = value.with_(binding=new_binding())
            self.env[name] = value
            self._note_binding(name, value)
            if line is not None:
                self.walk.events.append(NameStore(
                    self._where(line), name, self.scope_of(name), value, chained=name in value.reads, operand=operand))
        elif isinstance(target, cst.Attribute):
            owner = self.ev(target.value)
            owner_name = dotted(target.value) or "?"
            full = f"{owner_name}.{target.attr.value}"
            if line is not None:
                memo = full in self._unset
                self.walk.events.append(AttributeStore(
                    self._where(line), owner, owner_name, target.attr.value, value, target=target, operand=operand,
                    memo=memo))
                if memo:
                    self._memos.add(full)
            if owner_name == self.role.self_name:
                self.env[full] = value
                self._note_binding(full, value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            if any(isinstance(e, cst.StarredElement) for e in target.elements):
                for element in target.elements:  # positions past a *rest are unknown
                    self._bind(element.value, UNKNOWN, line)
                return
            for index, element in enumerate(target.elements):
                self._bind(element.value, value.element(index), line)
        elif isinstance(target, cst.Subscript):
            container = self.ev(target.value)
            for element in target.slice:
                if isinstance(element.slice, cst.Index):
                    self.ev(element.slice.value)
            if container.kind is not Kind.TENSOR and line is not None:
                key = target.slice[0].slice.value if len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) \
                    else None
                # One slot: a literal key, or the enclosing function's variable (`activation[name] =
                # output` in a hook made per layer): the same key at every call of this function.
                fixed_key = isinstance(key, (cst.Integer, cst.SimpleString)) or (
                    isinstance(key, cst.Name) and self.scope_of(key.value) == "closure"
                    and key.value not in self.scan.declared_nonlocal)  # `nonlocal step; step += 1`: a new key
                memo = key is not None and (dotted(target.value), code(key)) in self._absent \
                    and self._same_every_iteration(key)
                not_tensor = container.kind is Kind.CONTAINER or isinstance(
                    key, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
                self._container_add(target.value, "setitem", value, line, overwrites=fixed_key, memo=memo,
                                    key=code(key) if key is not None else None, not_tensor=not_tensor)
            elif line is not None and isinstance(target.value, cst.Name) and value.holds_graph():
                # `loss_bank[idx] = per_sample` on a tensor: the same chain, on a name
                name = target.value.value
                self.walk.events.append(NameStore(self._where(line), name, self.scope_of(name), value,
                                                  augmented=True, chained=True))
                # and from here on the tensor carries the value's graph (CopySlices, measured on
                # torch 2.13: `o = torch.empty(4, 3); o[0] = w * 2` gives o a grad_fn), as does
                # every name bound to the same tensor (theseus fills a fresh poses tensor so)
                if container.kind is Kind.TENSOR and not container.graph:
                    written = container.with_(graph=True, origin=container.origin or value.origin)
                    for alias, held in list(self.env.items()):
                        if alias == name or (container.binding is not None and held.binding == container.binding):
                            self.env[alias] = written.with_(reads=held.reads | value.reads)
                            self._note_binding(alias, self.env[alias])
            elif line is not None and isinstance(target.value, cst.Attribute) and value.holds_graph():
                # `self.protos[c] = f`: a tensor written in place takes the value's graph into its
                # grad_fn (CopySlices), on top of what the last write left: an update from itself.
                owner = self.ev(target.value.value)
                if owner.kind is not Kind.CTX:
                    self.walk.events.append(AttributeStore(
                        self._where(line), owner, dotted(target.value.value) or "?", target.value.attr.value,
                        value, augmented=True, target=target.value))

    def _augmented(self, node: cst.AugAssign, line: cst.CSTNode) -> None:
        value = self.ev(node.value)
        target = node.target
        if isinstance(target, cst.Name) and value.kind is Kind.CONTAINER:  # buf += [h] is an extend
            self._container_add(target, "+=", value, line)
        elif isinstance(target, cst.Name):
            old = self.env.get(target.value, UNKNOWN)
            self.env[target.value] = combine(old, value).with_(binding=old.binding or new_binding())
            self._note_binding(target.value, self.env[target.value])
            self.walk.events.append(NameStore(
                self._where(line), target.value, self.scope_of(target.value), value, augmented=True, chained=True))
        elif isinstance(target, cst.Attribute):
            owner = self.ev(target.value)
            owner_name = dotted(target.value) or "?"
            if value.kind is Kind.CONTAINER:  # self.buf += [h] is an extend
                self._container_add(target, "+=", value, line)
            else:
                self.walk.events.append(AttributeStore(
                    self._where(line), owner, owner_name, target.attr.value, value, augmented=True,
                    target=target))
        elif isinstance(target, cst.Subscript):
            # `epoch_loss[0] += loss`, `self.stats[k] += loss`: the slot chains like the name would
            # (CopySlices on a tensor buffer, a new sum in a list or dict).
            container = target.value
            self.ev(container)
            if isinstance(container, cst.Name):
                self.walk.events.append(NameStore(self._where(line), container.value, self.scope_of(container.value),
                                                  value, augmented=True, chained=True))
            elif isinstance(container, cst.Attribute):
                self.walk.events.append(AttributeStore(
                    self._where(line), self.ev(container.value), dotted(container.value) or "?",
                    container.attr.value, value, augmented=True, target=container))

    def _deleted(self, target: cst.BaseExpression, line: cst.CSTNode) -> None:
        """`del d[k]` (and each of `del d[k], e[j]`): the entry is gone."""
        if isinstance(target, cst.Tuple):
            for element in target.elements:
                self._deleted(element.value, line)
        elif isinstance(target, cst.Subscript) and len(target.slice) == 1 \
                and isinstance(target.slice[0].slice, cst.Index):
            removed = dotted(target.value)
            if removed is not None:
                self.walk.events.append(ContainerRemove(self._where(line), removed, code(target.slice[0].slice.value)))

    def _same_every_iteration(self, key: cst.BaseExpression) -> bool:
        """Whether a memo's key reads no name an enclosing loop binds afresh: a key made per
        iteration (`if step not in seen: seen[step] = loss`) adds one value per step."""
        fresh = set().union(*(loop.fresh_names for loop in self.loops)) if self.loops else set()
        return fresh.isdisjoint(self.model.names_in(key))

    def _container_add(self, container: cst.BaseExpression, method: str, value: Val, line: cst.CSTNode,
                       overwrites: bool = False, through: str | None = None,
                       origin: cst.CSTNode | None = None, memo: bool = False, key: str | None = None,
                       not_tensor: bool = False) -> None:
        name = dotted(container)
        if isinstance(container, cst.Name):
            scope = self.scope_of(container.value)
        elif name is not None and self.role.self_name and name.split(".")[0] == self.role.self_name:
            scope = "self-attribute"
        elif name is not None:
            scope = "attribute"
        else:
            return  # a container we cannot name: a call result, a subscript of one
        self.walk.events.append(ContainerAdd(self._where(line), container, name, scope, method, value, overwrites,
                                             through, origin, memo, key, not_tensor))

    def _kept_by(self, call: cst.Call, helper: str):
        """What a helper of this file adds to a container its caller passed (`keep(history, loss)`)
        is added here, at the call, to the caller's container."""
        def keep(container: cst.BaseExpression, add: ContainerAdd) -> None:
            self._container_add(container, add.method, add.value, call, add.overwrites, through=helper,
                                origin=add.where.node, memo=add.memo)
        return keep

    def _note_item(self, container: cst.BaseExpression, receiver: Val, item: Val) -> None:
        """`outs.append(out)` on a list bound here: `return tuple(outs)` then returns what was
        appended (the first kind of item seen stands for all)."""
        if isinstance(container, cst.Name) and receiver.kind is Kind.CONTAINER and receiver.item is None \
                and item.kind is not Kind.UNKNOWN and container.value in self.env:
            self.env[container.value] = self.env[container.value].with_(item=item)

    # ----- expressions ----------------------------------------------------------------------

    def ev(self, expr: cst.BaseExpression | None) -> Val:
        value = self._ev(expr) if expr is not None else UNKNOWN
        if self.no_grad and (value.graph or value.kind is Kind.CONTAINER and value.holds_graph()):
            value = _graph_free(value)
        return value

    def _ev(self, e: cst.BaseExpression) -> Val:
        # By exact type: libcst's node classes are abstract-base classes, and isinstance against
        # one goes through ABCMeta (117 ns, a 7-class tuple 321 ns, against 19 for `is`; none of
        # these classes has a subclass). This runs once per expression evaluated.
        kind = type(e)
        if kind is cst.Name:
            return self._name(e.value)
        if kind in _LITERALS:
            return SCALAR
        if kind is cst.Attribute:
            return self._attribute(e)
        if kind is cst.Call:
            return self._call(e)
        if kind is cst.Subscript:
            return self._subscript(e)
        if kind is cst.BinaryOperation:
            left, right = self.ev(e.left), self.ev(e.right)
            if isinstance(e.operator, cst.Multiply) and (left.kind is Kind.CONTAINER) != (right.kind is Kind.CONTAINER) \
                    and Kind.TENSOR not in (left.kind, right.kind):
                return left if left.kind is Kind.CONTAINER else right  # `[outputs] * n`: the same items, repeated
            if isinstance(e.operator, cst.Add):
                self._sums[id(e)] = (left, right)
            return combine(left, right)
        if kind is cst.UnaryOperation:
            inner = self.ev(e.expression)
            if isinstance(e.operator, cst.Not):
                return SCALAR
            return tensor(inner, int64=inner.int64).with_(assumed=inner.assumed, one_element=inner.one_element) \
                if inner.is_tensor else inner.with_(binding=None)
        if kind is cst.BooleanOperation:
            return merge(self.ev(e.left), self.ev(e.right))
        if kind is cst.Comparison:
            operands = [self.ev(e.left)] + [self.ev(c.comparator) for c in e.comparisons]
            # `bias is not None`, `k in cache`: a Python bool whatever the operands are.
            if any(isinstance(c.operator, _BOOL_COMPARISONS) for c in e.comparisons):
                return SCALAR
            if any(o.is_tensor for o in operands):
                return tensor(*operands, keep_graph=False)
            return SCALAR
        if kind is cst.IfExp:
            self.ev(e.test)
            return merge(self.ev(e.body), self.ev(e.orelse))
        if kind is cst.Tuple or kind is cst.List or kind is cst.Set:
            return self._sequence(e.elements)
        if kind is cst.Dict:
            values = [self.ev(el.value) for el in e.elements if isinstance(el, cst.DictElement)]
            return Val(Kind.CONTAINER, elements=tuple(values))
        if kind in _COMPREHENSIONS:
            return self._comprehension(e)
        if kind is cst.NamedExpr:
            value = self.ev(e.value)
            self._bind(e.target, value, None)
            return value
        if kind is cst.Await:
            return self.ev(e.expression)
        return UNKNOWN

    def _sequence(self, elements) -> Val:
        values = []
        for element in elements:
            if isinstance(element, cst.StarredElement):
                starred = self.ev(element.value)
                return Val(Kind.CONTAINER, item=starred.element(None) if starred.members() else None)
            values.append(self.ev(element.value))
        return Val(Kind.CONTAINER, elements=tuple(values), reads=frozenset().union(*(v.reads for v in values)))

    def _comprehension(self, e) -> Val:
        saved = dict(self.env)
        this_pass = self._passes[-1]
        saved_pass = (set(this_pass.fresh), dict(this_pass.clean_at_end))
        clause = e.for_in
        while clause is not None:
            self._bind(clause.target, self.ev(clause.iter).element(None), None)
            clause = clause.inner_for_in
        item = self.ev(e.value if isinstance(e, cst.DictComp) else e.elt)
        self.env = saved
        this_pass.fresh, this_pass.clean_at_end = saved_pass
        return Val(Kind.CONTAINER, item=item)

    def _name(self, name: str) -> Val:
        if name == "None":
            return NONE
        if name in ("True", "False"):
            return SCALAR
        value = self.env.get(name) or self.enclosing.get(name)
        if value is None:
            value = self.model.global_value(name)
        return self._read(name, value)

    def _attribute(self, e: cst.Attribute, base: Val | None = None) -> Val:
        attr = e.attr.value
        full = dotted(e)
        if full is not None and full in self.env:  # self.h assigned earlier in this walk
            if full in self._memos and full != self._testing:
                self.walk.memos_read.add(full)
            return self._read(full, self.env[full])
        if base is None:
            base = self.ev(e.value)
        reads = base.reads | ({full} if full else set())
        if base.kind is Kind.CTX:
            if attr == "saved_tensors":
                return Val(Kind.CONTAINER, item=Val(Kind.TENSOR))
            if attr == "needs_input_grad":
                return Val(Kind.CONTAINER, item=SCALAR)
            return UNKNOWN
        if base.kind is Kind.CONTAINER and attr in base.element_names:
            return base.elements[base.element_names.index(attr)]
        if attr in api.SCALAR_ATTRIBUTES:
            return Val(Kind.SCALAR, reads=frozenset(reads))
        if base.is_tensor:
            if attr in api.VIEW_ATTRIBUTES:
                return view(base)
            if attr in api.DETACHED_ATTRIBUTES:
                return Val(Kind.TENSOR, int64=base.int64, reads=frozenset(reads))
            if base.graph and not attr.startswith("_"):
                # A model's output object (HuggingFace's `out.loss`, `out.logits`): its fields carry the graph.
                return Val(Kind.TENSOR, graph=True, reads=frozenset(reads), assumed=True)
        if full is not None and self.role.self_name and full.split(".")[0] == self.role.self_name \
                and full.count(".") == 1:
            known = self.role.self_attributes.get(attr)
            # What __init__ put there, unless that is unknown (`self.teacher = eval(name)(cfg)`,
            # `self.model = model`): then the name is the evidence, as for one __init__ never sets.
            # An instance of a plain class (`self.meter = AverageMeter()`) is known by its class.
            if known is not None and (known.kind is not Kind.UNKNOWN or known.holds_graph()
                                      or known.project_class is not None or known.module_class is not None):
                return known.with_(reads=frozenset(reads))
        if base.kind is Kind.UNKNOWN and base.graph and not attr.startswith("_"):
            if attr in api.DISTRIBUTION_DESCRIPTIONS:
                return Val(Kind.SCALAR, reads=frozenset(reads))
            return Val(Kind.TENSOR, graph=True, reads=frozenset(reads), assumed=True)  # dist.mean, dist.logits
        if base.module_class is not None:
            declared = self.model.class_attribute(base.module_class, attr)  # `meta: torch.Tensor` in the class
            if declared is not None:
                return declared.with_(graph=declared.graph or (declared.is_tensor and base.graph), reads=frozenset(reads))
        if base.module_class is not None and self.model.stores_graph_on_self(base.module_class, attr):
            # `model.last_logits` where Net.forward did `self.last_logits = logits`
            return Val(Kind.TENSOR, graph=True, reads=frozenset(reads), assumed=True)
        if full is not None and looks_like_module(full):
            return Val(Kind.MODULE, reads=frozenset(reads))
        if full is not None and full in self.scan.tensor_uses:  # `pattern.bitmask.is_contiguous()` in this body
            return Val(Kind.TENSOR, graph=base.graph, reads=frozenset(reads))
        return Val(reads=frozenset(reads))

    def _subscript(self, e: cst.Subscript) -> Val:
        base = self.ev(e.value)
        indexes = []
        advanced = False
        for element in e.slice:
            if isinstance(element.slice, cst.Index):
                index_value = self.ev(element.slice.value)
                advanced = advanced or index_value.is_tensor or index_value.kind is Kind.CONTAINER
                indexes.append(element.slice.value)
        if base.kind is Kind.CONTAINER:
            if not indexes:  # `args[:n]`, `outs[1:]`: a slice of a container is a container of the same things
                return Val(Kind.CONTAINER, item=base.item if base.item is not None else (
                    base.elements[0] if base.elements and all(x.kind is base.elements[0].kind for x in base.elements)
                    else None), is_input=base.is_input, reads=base.reads)
            literal = _int_literal(indexes[0]) if len(indexes) == 1 else None
            item = base.element(literal)
            # read from the container: `self.stats["z"] = self.stats["z"] + z` chains that slot
            return item.with_(reads=item.reads | base.reads) if base.reads - item.reads else item
        if base.is_tensor:
            if advanced:  # advanced indexing copies
                return tensor(base, int64=base.int64).with_(assumed=base.assumed)
            return view(base)
        if base.kind is Kind.MODULE:
            return Val(Kind.MODULE)
        if base.kind is Kind.SCALAR:
            return SCALAR
        # An int64 array or tensor (`score.argsort()`) indexed: int64 too, a tensor or not.
        return Val(reads=base.reads, int64=base.int64)

    # ----- calls ----------------------------------------------------------------------------

    def _call(self, e: cst.Call) -> Val:
        args = [(a, self.ev(a.value)) for a in e.args]
        positional = [v for a, v in args if a.keyword is None and a.star == ""]
        keywords = {a.keyword.value: (a.value, v) for a, v in args if a.keyword is not None}
        func = e.func
        name = self.model.imports.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None

        if isinstance(func, cst.Attribute):
            receiver = self.ev(func.value)
            helper = self._class_helper(func)
            if helper is not None:  # `Base._setup(ctx, x, w)`: another class's staticmethod given ctx
                self._follow(helper, e, args)
            result = self._method(e, func.attr.value, receiver, args, positional, keywords)
            if result is not None:
                return result
            result = self._own_method(e, func, receiver, args)
            if receiver.kind is Kind.MODULE and (result is None or (result.kind is Kind.UNKNOWN and not result.holds_graph())):
                # `model.compute_loss(out)`: its def, walked, says what each place holds
                # (`return loss, loss.item(), 0`); where it cannot, the method's name guesses
                result = self._module_method(func.attr.value, positional) or result
            if result is not None:
                return result
        else:
            receiver = None

        if isinstance(func, cst.Name):
            builtin = self._builtin(e, func.value, args, positional)
            if builtin is not None:
                return builtin
            owner = self.model.apply_aliases.get(func.value) if func.value not in self.env else None
            if owner is not None:  # `index_first_axis(x, indices)` with `index_first_axis = IndexFirstAxis.apply`
                return self._applied(e, owner, args, positional)
            local = self.nested_defs.get(func.value) or self.model.functions.get(func.value) \
                or self.model.compiled(func.value)
            if local is not None:
                self._follow(local, e, args)
                self._declared_by_callee(local, args)
                if _DETACHING_NAME.search(func.value):
                    return DETACHED
                returned = UNKNOWN
                # a closure's result needs its enclosing names (the module's own defs are no closures)
                if func.value not in self.nested_defs or isinstance(self.function, cst.Module):
                    returned = self.model.call_result(local, None, e, args, None, None,
                                                      keep=self._kept_by(e, func.value))
                if returned.kind is Kind.UNKNOWN and self.model.detaches(local):
                    return DETACHED
                return returned
            if _DETACHING_NAME.search(func.value):  # an imported repackage_hidden / detach_state
                return DETACHED
        if name is not None and any(v.kind is Kind.CTX for _, v in args):  # ctx: see _follow
            self._follow_imported(name, e, args)

        if name is not None:
            torch_value = self._torch_call(name, args, positional, keywords)
            if torch_value is not None:
                return torch_value
            if name in self.model.module_class_names:
                return Val(Kind.MODULE, module_class=name)
            if name in self.model.function_class_names:
                return UNKNOWN
            if name in self.model.plain_class_names:  # `meter = Meter()` in the training function
                return Val(module_class=name)
            kept = []
            imported = self.model.imported_call(name, args, kept)
            self._kept_elsewhere(e, kept, None, lambda: self.model.project.where_defined(name))
            if imported is not None:
                return imported

        if isinstance(func, cst.Attribute):
            callee = self._attribute(func, base=receiver)
        elif isinstance(func, (cst.Name, cst.Subscript, cst.Call)):
            callee = self.ev(func)
        else:
            callee = UNKNOWN
        if callee.kind is Kind.MODULE and callee.module_class is None and callee.project_class is None:
            given = [v if v.kind is Kind.MODULE else Val(Kind.MODULE) for a, v in args if a.keyword is None
                     and (v.kind is Kind.MODULE or (isinstance(a.value, (cst.Name, cst.Attribute))
                                                    and looks_like_module(dotted(a.value) or "")))]
            if given:
                # Named like a module only (`post_patch_model`, `dispatch.patch_peft_model`) and
                # given a model: a function that prepares the model and hands it back, as
                # unsloth's loaders do; no module takes another module as its input.
                return given[0]
        if callee.kind is Kind.MODULE:  # calling a module: its output is graph-attached
            # (a tensor only assumed, unless the module is one of torch's losses: see _loss_module)
            output = tensor(*positional, Val(graph=True, origin=callee.origin)).with_(assumed=not callee.one_element,
                                                                                    one_element=callee.one_element)
            numbers = self.model.forward_numbers(callee.module_class) if callee.module_class else frozenset()
            if numbers:  # a tuple whose numbers the forward of this file's class shows
                return Val(Kind.CONTAINER, elements=tuple(
                    SCALAR if i in numbers else view(output) for i in range(max(numbers) + 1)),
                    item=view(output), reads=output.reads)
            return output
        return UNKNOWN

    def _follow_imported(self, qualified: str, call: cst.Call, args) -> None:
        """`stash(ctx, x)` with stash in another module of the project: what it stores on ctx,
        as stores made at this call (their own lines are in a tree this file's report cannot
        point into)."""
        found = self.model.imported_ctx_stores(qualified, args)
        if found is None:
            return
        stores, at = found
        where, callee = self._where(call), dotted(call.func) or "?"
        ctx_name = next((dotted(a.value) for a, v in args if v.kind is Kind.CTX), None) or self.role.ctx_name
        for store in stores:
            self.walk.events.append(replace(store, where=replace(store.where, node=call, loops=where.loops,
                                                                 no_grad=where.no_grad), owner_name=ctx_name,
                                            target=None, through=(callee, at)))

    def _declared_by_callee(self, function: cst.FunctionDef, args) -> None:
        """`k_update_fwd(k, a, ka, cu_seqlens)` where that def of the file declares `cu_seqlens:
        torch.Tensor | None`: a name nothing had told about is, from here on, what the def
        declares it takes (the same evidence as a caller's annotation, _callers_declare); one
        given to a `torch.LongTensor` parameter is an int64 tensor, a tensor of no known dtype too."""
        params = [*function.params.posonly_params, *function.params.params]
        # After a `*xs` the positions are unknown: only the arguments before it bind by position.
        positional = []
        for arg, value in args:
            if arg.star:
                break
            if arg.keyword is None:
                positional.append((arg, value))
        bound = list(zip(positional, params))
        by_name = {p.name.value: p for p in (*params, *function.params.kwonly_params)}
        bound += [((a, v), by_name[a.keyword.value]) for a, v in args
                  if a.keyword is not None and a.keyword.value in by_name]
        for (arg, value), param in bound:
            if value.kind in (Kind.UNKNOWN, Kind.TENSOR) and not value.int64 and isinstance(arg.value, cst.Name) \
                    and param.annotation is not None and arg.value.value in self.env:
                declared = annotated_value(param.annotation.annotation, self.model.imports)
                # `token_indices: torch.LongTensor`: an int64 one, a tensor of no known dtype too
                if declared.kind is Kind.TENSOR and (value.kind is Kind.UNKNOWN or declared.int64):
                    name = arg.value.value
                    self.env[name] = self.env[name].with_(kind=Kind.TENSOR, int64=declared.int64)

    def _kept_elsewhere(self, call: cst.Call, walks: list, receiver: str | None, at) -> None:
        """What another module's def or method kept past the call, as events of this walk."""
        if not walks:
            return
        where, callee, line = self._where(call), dotted(call.func) or "?", at()
        scope = self.scope_of(receiver.split(".")[0]) if receiver else None
        for walk in walks:
            for stored in walk.events:
                self.walk.events.append(KeptElsewhere(where, callee, receiver, scope, walk.role.self_name, stored, line))

    def _class_helper(self, func: cst.Attribute) -> cst.FunctionDef | None:
        """`Base._setup` for a class of this file and a staticmethod of it."""
        if not isinstance(func.value, cst.Name) or self.role.ctx_name is None:
            return None
        found = self.model.method_of(func.value.value, func.attr.value)
        if found is None or not any(dotted(d.decorator) == "staticmethod" for d in found[0].decorators):
            return None
        return found[0]

    def _own_method(self, e: cst.Call, func: cst.Attribute, receiver: Val, args) -> Val | None:
        """`self.compute_loss(batch)`, `model.encode(x)`: a method of a class of this file, called
        on an instance of it (its own self, or a module instance known by class)."""
        receiver_name = dotted(func.value)
        if receiver.project_class is not None:
            kept: list = []
            result = self.model.imported_method(receiver.project_class, func.attr.value, args, kept)
            self._kept_elsewhere(e, kept, receiver_name,
                                 lambda: self.model.project.method_line(receiver.project_class, func.attr.value))
            return result
        if receiver.module_class is not None or (receiver_name is not None and receiver_name == self.role.self_name
                                                 and self.role.owner_class):
            owner = receiver.module_class or self.role.owner_class
            found = self.model.method_of(owner, func.attr.value)
            if found is None:  # a base of another project module defines it (kornia's forward_parameters)
                return self._inherited_elsewhere(e, func, receiver_name, owner, args)
        elif self._is_super(func.value):
            # `super().training_step(batch, i)`: the base's method, run on this self (what it
            # returns and keeps on self are this call's)
            found = self.model.inherited_method(self.role.owner_class, func.attr.value)
            receiver_name = self.role.self_name
            receiver = self.env.get(receiver_name, receiver)
            if found is None:  # a base of another project module: walked there
                return self._inherited_elsewhere(e, func, receiver_name, self.role.owner_class, args, "super().")
        else:
            return None
        if found is None:
            return None
        method, info = found
        return self.model.call_result(method, info, e, args, receiver, receiver_name,
                                      keep=self._kept_by(e, f"{info.node.name.value}.{func.attr.value}"))

    def _inherited_elsewhere(self, e: cst.Call, func: cst.Attribute, receiver_name: str | None, owner: str,
                             args, shown: str = "") -> Val | None:
        """A method the class `owner` of this file inherits from a base of another project module,
        walked there on this receiver (None: no such base defines it)."""
        kept: list = []
        inherited = self.model.imported_inherited_method(owner, func.attr.value, args, kept)
        if inherited is None:
            return None
        result, base = inherited
        line = partial(self.model.project.method_line, base, func.attr.value)
        self._kept_elsewhere(e, kept, receiver_name, line)
        if result.holds_graph():  # its graph is what the base's method returns: the message names it
            where = line()
            result = result.with_(origin=f"{shown or (receiver_name or '?') + '.'}{func.attr.value}()"
                                  + (f" ({where})" if where else ""))
        return result

    def _is_super(self, node: cst.BaseExpression) -> bool:
        """`super()` (or `super(Owner, self)`) in a method of a class of this file."""
        if not (self.role.owner_class and self.role.self_name and isinstance(node, cst.Call)
                and isinstance(node.func, cst.Name) and node.func.value == "super" and "super" not in self.env
                and "super" not in self.model.module_names):
            return False
        return not node.args or [dotted(a.value) for a in node.args] == [self.role.owner_class, self.role.self_name]

    def _builtin(self, e: cst.Call, name: str, args, positional) -> Val | None:
        if name in self.env or name in self.model.module_names:
            return None
        if name == "setattr" and len(args) >= 3:
            owner_expr = args[0][0].value
            attr_expr = args[1][0].value
            attr = attr_expr.evaluated_value if isinstance(attr_expr, cst.SimpleString) else "<dynamic>"
            self.walk.events.append(AttributeStore(
                self._where(e), args[0][1], dotted(owner_expr) or "?", str(attr), args[2][1]))
            return SCALAR
        if name == "map" and len(args) == 2 and isinstance(args[0][0].value, cst.Lambda) \
                and isinstance(args[1][0].value, (cst.Tuple, cst.List)):
            # `q, k, v = map(lambda t: rearrange(t, ...), (q, k, v))`: the lambda on each element
            return Val(Kind.CONTAINER, elements=tuple(self._apply_lambda(args[0][0].value, item)
                                                      for item in args[1][1].members()))
        if name in ("tuple", "list") and positional:
            source = positional[0]
            return source if source.kind is Kind.CONTAINER else Val(Kind.CONTAINER, item=source.element(None))
        if name in ("sum",) and positional and positional[0].members():
            members = positional[0].members()
            return tensor(*members).with_(assumed=all(m.assumed for m in members if m.is_tensor)) \
                if any(m.is_tensor for m in members) else UNKNOWN
        if name in api.SCALAR_BUILTINS:
            return Val(Kind.SCALAR, reads=frozenset().union(*(v.reads for _, v in args)) if args else frozenset())
        return None

    def _apply_lambda(self, function: cst.Lambda, argument: Val) -> Val:
        params = [p.name.value for p in function.params.params]
        if len(params) != 1:
            return UNKNOWN
        saved = self.env.get(params[0])
        self.env[params[0]] = argument
        try:
            return self.ev(function.body)
        finally:
            if saved is None:
                self.env.pop(params[0], None)
            else:
                self.env[params[0]] = saved

    def _applied(self, e: cst.Call, owner: str, args, positional: list[Val]) -> Val:
        """A Function of this file applied: what each argument is, as an event; what it gives."""
        self.walk.events.append(FunctionApplied(self._where(e), e, owner, tuple(args)))
        if self.model.returns_int64(owner):  # forward returns an index: no graph, int64
            return Val(Kind.TENSOR, int64=True)
        return tensor(*positional)

    def _module_method(self, method: str, positional: list[Val]) -> Val | None:
        """A method of a module whose def cannot be read: by its name, the model's own computation
        (`model.compute_loss(x, y)`, `model.encode(x)`), or None: `model.encoder(x)`, what the
        attribute is decides. Not when every argument is a Python number or a shape: computing
        from sizes alone (kornia's `self.forward_parameters(mask.shape)` draws random parameters)
        is no computation on the step's inputs."""
        if method == "forward" or (any(v.kind is not Kind.SCALAR for v in positional)
                                   and api.GRAPH_METHOD_NAME.search(method)):
            return tensor(*positional, Val(graph=True)).with_(assumed=True)
        return None

    def _method(self, e, method: str, receiver: Val, args, positional, keywords) -> Val | None:
        if method == "backward" and not positional and "gradient" not in keywords \
                and isinstance(e.func.value, cst.Name) and e.func.value.value in self.env \
                and receiver.kind in (Kind.TENSOR, Kind.UNKNOWN) and self._condition_depth == self._passes[-1].depth:
            # backward() without a gradient runs only on a one-element tensor: from here on it is one,
            # and without retain_graph its graph is freed (known after a backward every pass runs)
            name = e.func.value.value
            retained = any(k in keywords and not (isinstance(keywords[k][0], cst.Name)
                                                  and keywords[k][0].value == "False")
                           for k in ("retain_graph", "create_graph"))
            self.env[name] = self.env[name].with_(kind=Kind.TENSOR, assumed=False, one_element=True,
                                                  consumed=not retained)
        if receiver.kind is Kind.CTX:
            if method == "save_for_backward":
                self.walk.events.append(SavedForBackward(
                    self._where(e), tuple((a.value, v) for a, v in args)))
            elif method == "mark_non_differentiable":
                self.walk.events.append(MarkedNonDifferentiable(self._where(e), tuple(v for _, v in args)))
            return SCALAR
        if method in ("pop", "clear") and receiver.kind in (Kind.CONTAINER, Kind.UNKNOWN):
            removed = dotted(e.func.value)
            if removed is not None and (method == "clear" or e.args):
                key = code(e.args[0].value) if method == "pop" else None
                self.walk.events.append(ContainerRemove(self._where(e), removed, key))
        if (method in api.CONTAINER_STORING_METHODS and method != "update"
                and receiver.kind in (Kind.CONTAINER, Kind.UNKNOWN)) \
                or (method == "update" and receiver.kind is Kind.CONTAINER):
            if method in ("insert", "setdefault"):
                value = positional[1] if len(positional) > 1 else UNKNOWN
            elif method in ("extend", "update"):
                value = positional[0] if positional else UNKNOWN
            else:
                value = positional[0] if positional else UNKNOWN
            container = e.func.value
            if isinstance(container, cst.Name) and container.value in self.scan.item_backward_roots \
                    and method in ("append", "insert") and value.kind in (Kind.TENSOR, Kind.UNKNOWN) and not self.no_grad:
                value = value.with_(kind=Kind.TENSOR, graph=True)  # `losses[-1].backward()` later: a graph
            first = e.args[0] if e.args else None  # the key: `d.setdefault(*pair)` has none to read
            memo = method == "setdefault" and first is not None and first.keyword is None and first.star == "" \
                and self._same_every_iteration(first.value)
            self._container_add(e.func.value, method, value, e, memo=memo)
            self._note_item(e.func.value, receiver, value if method in ("append", "insert") else value.element(None))
            return SCALAR
        if receiver.kind is Kind.MODULE:
            if method in api.MODULE_RETURNING_METHODS:
                # `Net().to(device)` is that Net: its class goes with it (`apply` too returns self)
                return Val(Kind.MODULE, module_class=receiver.module_class, project_class=receiver.project_class,
                           origin=receiver.origin)
            if method.startswith("register_"):
                # nn.Module's register_buffer, register_forward_pre_hook, ...: None or a handle,
                # whatever `forward_` in the name suggests (torch's fsdp keeps the handles in lists)
                return UNKNOWN
            if receiver.module_class is not None or (method != "forward" and receiver.project_class is not None):
                # its class's own method is walked (_own_method), else _module_method guesses; so is
                # `self.forward(...)` of a class of this file (unsloth's RoPE table module calls its
                # own forward, which computes from a buffer and arange: no graph)
                return None
            return self._module_method(method, positional)
        if method in api.PREPARING_METHODS and positional and receiver.kind is Kind.UNKNOWN \
                and not any(a.keyword is not None for a, _ in args):
            # `model = accelerator.prepare(model)`: the same objects back, wrapped
            return positional[0] if len(positional) == 1 else Val(Kind.CONTAINER, elements=tuple(positional))
        if method == "apply" and receiver.kind is Kind.UNKNOWN:
            owner = dotted(e.func.value)
            if owner in self.model.function_class_names:
                return self._applied(e, owner, args, positional)
        if receiver.kind is Kind.UNKNOWN and api.proves_a_tensor(
                method, bool(args), (a.keyword.value for a, _ in args if a.keyword is not None)) \
                and not self._imported(e.func.value):
            # `w.t()`, `x.contiguous()`: only a tensor has the method, so it is one, and so is the
            # result (`math.sqrt(d)` is a module's function, not a tensor's method)
            receiver = receiver.with_(kind=Kind.TENSOR)
        if not receiver.is_tensor:
            if method in ("item", "tolist", "numpy", "size", "dim", "numel"):
                return SCALAR
            if method in api.INT64_METHODS and receiver.kind is Kind.UNKNOWN and not self._imported(e.func.value):
                # `score.argsort()`: a NumPy array has the method too, and its result is int64 as
                # well; a tensor or not, what save_for_backward is given must be one (it raises
                # otherwise), so saved_tensors counts it there.
                return Val(int64=True, reads=receiver.reads)
            if method == "detach":  # detached: whatever it was read from, it chains no graph
                return DETACHED
            if receiver.kind is Kind.UNKNOWN and receiver.graph:
                # a distribution made from graph-attached parameters: log_prob, entropy, rsample
                if method in api.DETACHING_METHODS or method in api.SCALAR_METHODS:
                    return DETACHED if method in api.DETACHING_METHODS else SCALAR
                return Val(Kind.TENSOR, graph=True, reads=receiver.reads, assumed=method not in _DISTRIBUTION_TENSORS)
            return None
        # A tensor method.
        if method in api.SCALAR_METHODS:
            return Val(Kind.SCALAR)
        if method in api.DETACHING_METHODS:
            return Val(Kind.TENSOR, int64=receiver.int64, assumed=receiver.assumed and method in _NOT_TENSOR_ONLY,
                       one_element=receiver.one_element)
        result = self._tensor_method(method, receiver, args, positional, keywords)
        # What it proves: a method no tuple, dict, number or string has shows a tensor (the code
        # runs); one element kept by an elementwise op or a full reduction (`loss.mean()`).
        assumed = receiver.assumed and method in _NOT_TENSOR_ONLY
        one = (method in _FULL_REDUCTIONS and not positional and set(keywords) <= {"dtype"}) or (
            receiver.one_element and (method in _KEEPS_ELEMENTS or (method in _ELEMENTWISE_WITH and all(
                v.one_element or (v.kind is Kind.SCALAR and not v.none) for _, v in args))))
        if result.kind is Kind.TENSOR and (result.assumed != assumed or result.one_element != one):
            result = result.with_(assumed=assumed, one_element=one)
        return result

    def _tensor_method(self, method: str, receiver: Val, args, positional, keywords) -> Val:
        if method == "requires_grad_" and receiver.param:
            return receiver  # in place: the parameter itself, a leaf with no graph
        int64 = receiver.int64
        dtype = self._dtype_is_int64(args)
        if method in api.INT64_METHODS:
            int64 = True
        elif method in api.NOT_INT64_METHODS:
            int64 = False
        elif dtype is not None:
            int64 = dtype
        if method in api.NEW_TENSOR_METHODS:
            return _new_tensor(int64, keywords)
        if method in api.INDEX_PAIR_METHODS or (method in api.INDEX_PAIR_WITH_DIM and (positional or "dim" in keywords)):
            return self._index_pair(tensor(receiver, *positional))
        if method in api.SPLITTING_METHODS:
            return Val(Kind.CONTAINER, item=view(receiver))
        if method in api.VIEW_METHODS and not (method == "to" and int64 != receiver.int64):
            return view(receiver, may_copy=method in api.MAYBE_COPY_METHODS, int64=int64)
        return tensor(receiver, *positional, *(v for _, v in keywords.values()), int64=int64,
                      keep_graph=method not in api.GRAPH_FREE_OPS)

    def _imported(self, expr: cst.BaseExpression) -> bool:
        """`math`, `np.linalg`, `torch.ops.mylib`: a name the file's imports bind, or an attribute of one."""
        name = dotted(expr)
        return name is not None and name.split(".")[0] in self.model.imports.aliases

    def _index_pair(self, values: Val) -> Val:
        return Val(Kind.CONTAINER, elements=(values.with_(int64=False), Val(Kind.TENSOR, int64=True)),
                   element_names=("values", "indices"))

    def _dtype_is_int64(self, args) -> bool | None:
        """Whether a dtype argument (`dtype=torch.long`, `.to(torch.int32)`) is int64; None
        when the call names no dtype."""
        for arg, _ in args:
            if arg.keyword is not None and arg.keyword.value != "dtype":
                continue
            if not isinstance(arg.value, (cst.Name, cst.Attribute)):
                continue
            name = self.model.imports.qualify(arg.value) or ""
            if name in api.INT64_DTYPES:
                return True
            if name.startswith("torch.") and name.rsplit(".", 1)[-1] in api.DTYPE_NAMES:
                return False
        return None

    def _torch_call(self, name: str, args, positional, keywords) -> Val | None:
        if name in api.PARAMETER_CONSTRUCTORS:
            # `nn.Parameter(k, requires_grad=False)` (tsai's fixed ROCKET kernels) is a registered
            # tensor that nothing trains: what an op makes of it carries no graph (measured).
            frozen = keywords.get("requires_grad")
            if frozen is not None and isinstance(frozen[0], cst.Name) and frozen[0].value == "False":
                return Val(Kind.TENSOR)
            return Val(Kind.TENSOR, param=True)
        if name.startswith("torch.nn.") and not name.startswith("torch.nn.functional."):
            if api.is_nn_module_class(name):
                return Val(Kind.MODULE, one_element=_loss_module(name, args))
            if name.startswith("torch.nn.init."):
                return SCALAR
            return None
        if name in ("torch.autograd.grad", "torch.autograd.functional.vjp"):
            # The gradients carry a graph only with create_graph=True (a gradient penalty).
            create = keywords.get("create_graph")
            graph = create is not None and isinstance(create[0], cst.Name) and create[0].value == "True"
            return Val(Kind.CONTAINER, item=Val(Kind.TENSOR, graph=graph))
        if name in api.CHECKPOINT_FUNCTIONS and positional:
            function = positional[0]
            called = Val(graph=True) if function.kind is Kind.MODULE else UNKNOWN
            return tensor(*positional[1:], called).with_(assumed=True)  # what the function returns
        if api.is_distribution(name):
            # Not a tensor, but it holds its parameters: what they carry, its methods give.
            made = tensor(*(v for _, v in args))
            return Val(graph=made.graph, reads=made.reads)
        if not api.is_tensor_op(name):
            return None
        sources = [v for _, v in args]
        if name in api.INDEX_PAIR_FUNCTIONS or (name.rsplit(".", 1)[-1] in api.INDEX_PAIR_WITH_DIM
                                                 and (len(positional) > 1 or "dim" in keywords)):
            return self._index_pair(tensor(*sources))
        if name in api.SPLITTING_FUNCTIONS:
            return Val(Kind.CONTAINER, item=tensor(*sources))
        dtype = self._dtype_is_int64([(a, v) for a, v in args if a.keyword is not None])
        if dtype is not None:
            int64 = dtype
        elif name in api.INT64_FUNCTIONS:
            int64 = not ("out_int32" in keywords)
        elif name == "torch.arange":
            int64 = all(v.kind is Kind.SCALAR for v in positional) and not any(
                isinstance(a.value, cst.Float) for a, _ in args if a.keyword is None)
        else:
            firsts = [positional[0]] if positional else []
            int64 = bool(firsts) and (firsts[0].int64 or (firsts[0].kind is Kind.CONTAINER and bool(firsts[0].members())
                                                            and all(m.int64 for m in firsts[0].members())))
        if int64 and name == "torch.randint" and _beyond_int32(_randint_high(args)):
            # Draws up to 2**32 (dropout seeds, RNG offsets) need int64's range: no index int32
            # could hold, and int32 would be wrong advice.
            int64 = False
        if name in api.LIKE_FUNCTIONS:
            return _new_tensor(int64, keywords)
        return tensor(*sources, int64=int64, keep_graph=name.rsplit(".", 1)[-1] not in api.GRAPH_FREE_OPS) \
            .with_(one_element=_reduces_fully(name, args, positional, keywords))

    def _follow(self, function: cst.FunctionDef, call: cst.Call, args) -> None:
        """Walk a helper or closure that receives ctx, with its parameters bound to the
        arguments, so what it stores on ctx is seen (`_stash(ctx, out)`)."""
        if self.depth >= self.MAX_CALL_DEPTH:
            return
        passes_ctx = any(v.kind is Kind.CTX for _, v in args)
        is_closure = function.name.value in self.nested_defs
        # A helper given ctx is followed from any walk: ctx is only ever a value in a Function's
        # walks and the helpers they reach, and a helper of another module walked for its ctx
        # stores (FileModel.imported_ctx_stores) may hand ctx on to a helper of its own module.
        if not passes_ctx and not (is_closure and self.role.ctx_name is not None):
            return
        bound = helper_arguments(function, args, self.model.prescan(function).tensor_uses)
        child = Walker(self.walk, function, depth=self.depth + 1,
                       enclosing={**self.enclosing, **self.env} if is_closure else None,
                       nested_defs=self.nested_defs if is_closure else None)
        child.bind_params(bound)
        child.run()


_INT32_MAX = 2**31 - 1


def _randint_high(args) -> cst.BaseExpression | None:
    """`torch.randint(high, size)`, `torch.randint(low, high, size)`, or `high=`: the bound."""
    keyword = next((a.value for a, _ in args if a.keyword is not None and a.keyword.value == "high"), None)
    if keyword is not None:
        return keyword
    positional = [a.value for a, _ in args if a.keyword is None and not a.star]
    if len(positional) == 2 and isinstance(positional[1], (cst.Tuple, cst.List)):
        return positional[0]
    return positional[1] if len(positional) >= 3 else None


def _beyond_int32(expr: cst.BaseExpression | None) -> bool:
    value = _int_literal(expr) if expr is not None else None
    return value is not None and value > _INT32_MAX + 1  # randint's bound is exclusive
