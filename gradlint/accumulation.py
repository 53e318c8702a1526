"""Sums in an autograd Function's backward whose order, and so whose float result, changes run to run.

Two questions:
- `nondeterministic_sums_in_backward(model, function, backward)`: the calls of backward that sum
  many values into one slot in an order that changes between runs (scatter_add_/index_add_/
  scatter_reduce sum or mean, index_put_(accumulate=True), gradlint.cuda_ext.scatter_add without
  deterministic=True, a custom kernel whose name says it adds atomically). Integer sums, sums of
  0/1 masks or ones (exact in any order), and arguments decided elsewhere are left out.
- `atomic_kernel_launches_from_backward(model)`: launches of a Triton kernel of the file that
  adds floats with tl.atomic_add, in backward or in a helper of the file that backward calls.

A compiled extension's function called in backward (`_ext.gather_points_grad(...)`) is read in
the project's C++ and CUDA sources where they are (native_sources): one whose kernel adds floats
with atomicAdd is such a sum too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from gradlint.file_model import AutogradFunction, FileModel, all_params, arguments_by_param, leading_params
from gradlint.flow import FunctionRole, Walk, Walker, walk_called
from gradlint.names import dotted
from gradlint.prescan import child_nodes
from gradlint.values import UNKNOWN, Kind, Val

# Which way a sum's order changes run to run: the kinds of `UnorderedSum`.
ATOMIC_ADD = "atomic_add"  # scatter_add_/index_add_/scatter_reduce(sum/mean): atomicAdd on CUDA
THREADED_ACCUMULATE = "threaded_accumulate"  # index_put_(accumulate=True): several CPU threads
CUDA_EXT_ATOMIC = "cuda_ext_atomic"  # gradlint.cuda_ext.scatter_add without deterministic=True
NAMED_ATOMIC_KERNEL = "named_atomic_kernel"  # a custom kernel whose name says it adds atomically
NATIVE_ATOMIC = "native_atomic"  # an extension's function whose CUDA source adds floats atomically


@dataclass(frozen=True)
class UnorderedSum:
    """One call in backward that sums floats in an order that changes from run to run."""

    node: cst.Call
    kind: str  # ATOMIC_ADD, THREADED_ACCUMULATE, CUDA_EXT_ATOMIC, NAMED_ATOMIC_KERNEL, NATIVE_ATOMIC
    shown: str  # the call as a user reads it: `Tensor.index_add_`, `torch.index_put`, `_ext.scatter_add_atomic`
    # The def backward calls that makes that call, when it is not backward's own:
    # `scatter()`, or `scatter() (utils/_scatter.py:14)` for another module's.
    through: str | None = None
    at: str | None = None  # NATIVE_ATOMIC: where the source adds (`src/sampling_gpu.cu:42`)


@dataclass(frozen=True)
class KernelLaunch:
    """`_bwd_kernel[grid](...)` of a Triton kernel that adds floats with tl.atomic_add."""

    node: cst.Call
    kernel: str
    defined_in: str | None = None  # `ops/kernels.py:12`, for a kernel imported from another module


def nondeterministic_sums_in_backward(model: FileModel, function: AutogradFunction,
                                      backward: cst.FunctionDef) -> list[UnorderedSum]:
    """The calls of `backward` (the def `function` runs as its backward) that sum floats in an
    order that changes from run to run, in the order the analysis walks them."""
    if not _may_sum(model, backward):
        return []
    exact = _ExactSums(model, backward)
    found = []
    for call in _calls_in_backward(model, function, backward):
        kind_shown = _unordered(model, call, exact)
        if kind_shown is not None:
            found.append(UnorderedSum(call.node, *kind_shown))
            continue
        through = _through_helper(model, call, exact)
        if through is not None:
            found.append(UnorderedSum(call.node, *through))
    return found


# Every call `_unordered` can report is named with one of these (the method, the torch function,
# the import it comes through, the kernel's name): a def without them in its text sums nothing.
_SUM_WORDS = ("scatter_add", "index_add", "index_put", "scatter_reduce", "atomic")


def _may_sum(model: FileModel, backward: cst.FunctionDef) -> bool:
    """Whether backward calls something named with one of _SUM_WORDS (as written or as imported),
    or a def of the file or of another project module whose text holds one: the calls
    `_unordered` reports, made there or one call deep. A no spares walking backward."""
    for name in model.prescan(backward).called_names:
        if _named_to_sum(model, name) or model.native_float_atomic_add(name) is not None:
            return True
        local = model.functions.get(name)
        if local is not None:
            if _calls_named_to_sum(model, local):
                return True
        elif name in model.imports.aliases and model.imported_def_holds(name, _SUM_WORDS):
            return True
    return False


def _named_to_sum(model: FileModel, name: str) -> bool:
    """A called name (its last part) that holds one of _SUM_WORDS, as written or as imported."""
    qualified = model.imports.aliases.get(name, name).lower()
    return any(word in qualified for word in _SUM_WORDS)


def _calls_named_to_sum(model: FileModel, function: cst.FunctionDef) -> bool:
    return any(_named_to_sum(model, called) for called in model.prescan(function).called_names)


def _through_helper(model: FileModel, call: _Call, exact: "_ExactSums") -> tuple[str, str, str] | None:
    """(kind, shown, through) when backward calls a def, of this file or imported from another
    module of the project, whose body sums in an order that changes run to run, walked with the
    call's values: `scatter(grad, index, reduce="sum")` doing `src.new_zeros(size).scatter_add_(...)`.
    Branches the call's string arguments rule out are left out (`if reduce == "max":`)."""
    func = call.node.func
    if not isinstance(func, cst.Name) or any(arg.star for arg, _ in call.args):
        return None
    name = func.value
    local = model.functions.get(name)
    if local is not None:
        if name in model.atomic_kernels or not _calls_named_to_sum(model, local):
            return None
        return _sum_in_helper(model, local, call, exact, f"{name}()")
    with model.imported_def(name, holding=_SUM_WORDS) as found:
        if found is None:
            return None
        helper_model, helper, where = found
        return _sum_in_helper(helper_model, helper, call, exact, f"{name}() ({where})")


def _sum_in_helper(model: FileModel, helper: cst.FunctionDef, call: _Call, caller_exact: "_ExactSums",
                   through: str) -> tuple[str, str, str] | None:
    walker = walk_called(model, helper, call.args, _CallRecorder)
    arguments = {param: arg.value for param, arg in arguments_by_param(helper, (arg for arg, _ in call.args)).items()}
    dead = _ruled_out(helper, {param: text for param, expr in arguments.items()
                               if (text := _string(expr)) is not None} | _string_defaults(helper, arguments))
    own_exact = _ExactSums(model, helper)

    def exact(expr: cst.BaseExpression) -> bool:  # a parameter sums what the caller passed
        if isinstance(expr, cst.Name) and expr.value in arguments:
            return caller_exact(arguments[expr.value])
        return own_exact(expr)

    for inner in walker.calls.values():
        if id(inner.node) in dead:
            continue
        kind_shown = _unordered(model, inner, exact)
        if kind_shown is not None:
            return kind_shown[0], kind_shown[1], through
    return None


def _string_defaults(helper: cst.FunctionDef, passed: dict[str, cst.BaseExpression]) -> dict[str, str]:
    """The string defaults of the parameters the call does not pass (`reduce: str = "sum"`)."""
    found = {}
    for param in all_params(helper):
        if param.name.value not in passed and param.default is not None:
            text = _string(param.default)
            if text is not None:
                found[param.name.value] = text
    return found


def _ruled_out(helper: cst.FunctionDef, strings: dict[str, str]) -> set[int]:
    """The calls in branches that cannot run with these string parameters (`if reduce == "any":`
    with reduce "sum"), and in what follows a branch that surely runs and surely returns."""
    dead: set[int] = set()
    if strings:
        _block(helper.body.body, strings, dead)
    return dead


# _block and _if_leaves recurse as module-level functions: closures calling each other would make
# a reference cycle holding the tree until the cyclic collector ran (see call_sites._visit).

def _bury(nodes, dead: set[int]) -> None:
    todo = list(nodes)
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Call):
            dead.add(id(node))
        todo.extend(child_nodes(node))


def _block(statements, strings: dict[str, str], dead: set[int]) -> bool:
    """Walks a block; whether it surely leaves the def (a return or raise on every path)."""
    for index, statement in enumerate(statements):
        if isinstance(statement, cst.If) and _if_leaves(statement, strings, dead):
            _bury(statements[index + 1:], dead)
            return True
        if isinstance(statement, cst.SimpleStatementLine) and any(
                isinstance(small, (cst.Return, cst.Raise)) for small in statement.body):
            return True
    return False


def _if_leaves(node: cst.If, strings: dict[str, str], dead: set[int]) -> bool:
    decided = _decide(node.test, strings)
    orelse = node.orelse
    if decided is True:
        if orelse is not None:
            _bury([orelse], dead)
        return _block(node.body.body, strings, dead)
    if decided is False:
        _bury([node.body], dead)
        if isinstance(orelse, cst.If):
            return _if_leaves(orelse, strings, dead)
        return _block(orelse.body.body, strings, dead) if orelse is not None else False
    taken = _block(node.body.body, strings, dead)
    if isinstance(orelse, cst.If):
        return _if_leaves(orelse, strings, dead) and taken
    other = _block(orelse.body.body, strings, dead) if orelse is not None else False
    return taken and other


def _decide(test: cst.BaseExpression, strings: dict[str, str]) -> bool | None:
    """A test of string parameters against literals (`reduce == "sum" or reduce == "add"`,
    `mode in ("a", "b")`, `not ...`), decided; None when anything else decides it."""
    if isinstance(test, cst.BooleanOperation):
        left, right = _decide(test.left, strings), _decide(test.right, strings)
        if isinstance(test.operator, cst.Or):
            return True if True in (left, right) else None if None in (left, right) else False
        return False if False in (left, right) else None if None in (left, right) else True
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _decide(test.expression, strings)
        return None if inner is None else not inner
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name) \
            and test.left.value in strings:
        value = strings[test.left.value]
        target = test.comparisons[0]
        operator = target.operator
        if isinstance(operator, (cst.Equal, cst.NotEqual)):
            other = _string(target.comparator)
            if other is None:
                return None
            return (value == other) == isinstance(operator, cst.Equal)
        if isinstance(operator, (cst.In, cst.NotIn)) and isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)):
            options = [_string(e.value) for e in target.comparator.elements]
            if any(option is None for option in options):
                return None
            return (value in options) == isinstance(operator, cst.In)
    return None


def atomic_kernel_launches_from_backward(model: FileModel) -> list[KernelLaunch]:
    """Launches of tl.atomic_add kernels, the file's own or imported from another module of the
    project, made in backward or in a helper of the file that backward calls."""
    if not model.function_classes:
        return []
    kernels = model.atomic_kernels
    running = model.backward_defs
    found = []
    for site in model.call_sites:
        func = site.call.func  # `_bwd_kernel[grid](...)`: a launch, in backward or a helper it calls
        if not (isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name)
                and site.function is not None and id(site.function) in running):
            continue
        name = func.value.value
        if name in kernels:
            found.append(KernelLaunch(site.call, name))
        else:
            defined_in = model.imported_atomic_kernel(name)
            if defined_in is not None:
                found.append(KernelLaunch(site.call, name, defined_in))
    return found


# Tensor methods that sum many sources into one slot: (where the summed values are: position,
# keyword) for the method form; the torch.* function form takes the tensor first.
_ATOMIC_ADD = {
    "scatter_add_": (2, "src"), "scatter_add": (2, "src"),
    "index_add_": (2, "source"), "index_add": (2, "source"),
    "scatter_reduce_": (2, "src"), "scatter_reduce": (2, "src"),
}
_INDEX_PUT = {"index_put_": (1, "values"), "index_put": (1, "values")}
_METHODS = {**_ATOMIC_ADD, **_INDEX_PUT}
_TORCH_FUNCTIONS = {f"torch.{m}": m for m in ("scatter_add", "index_add", "scatter_reduce", "index_put", "index_put_")}
_CUDA_EXT = frozenset({"gradlint.cuda_ext.scatter_add", "cuda_ext.scatter_add"})
_SUMMING_REDUCTIONS = frozenset({"sum", "mean"})
# A custom kernel whose name says it adds atomically: `scatter_add_atomic`, `atomicAdd`. A name
# alone says nothing about `segment_sum` or `scatter_add` in an extension: those may sort first.
_NAME_TOKENS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_SUMMING_WORDS = ("add", "sum", "scatter", "accum", "reduce", "segment")
_NEGATIONS = frozenset({"no", "non", "not", "without"})

# Values whose sum is exact in any order: 0/1 masks and ones (counting), in any float dtype;
# `is_max`/`has_edge` name a boolean mask by convention.
_ONES = frozenset({"torch.ones", "torch.ones_like"})
_CASTS = frozenset({"to", "float", "double", "half", "bfloat16", "type_as", "type", "bool", "contiguous"})
_BOOLEAN_NAME = re.compile(r"^(is|has)_\w+$")


@dataclass(frozen=True)
class _Call:
    node: cst.Call
    receiver: Val | None  # what `x` in `x.method(...)` evaluated to; None for a plain name call
    args: tuple[tuple[cst.Arg, Val], ...]


class _CallRecorder(Walker):
    """Walks backward as the analysis does, keeping what each call's receiver and arguments
    evaluated to: an int64 scatter_add_ sums exactly in any order and is not reported."""

    def __init__(self, walk: Walk, function: cst.FunctionDef):
        super().__init__(walk, function)
        self.calls: dict[int, _Call] = {}

    def _method(self, e, method, receiver, args, positional, keywords):
        self.calls[id(e)] = _Call(e, receiver, tuple(args))
        return super()._method(e, method, receiver, args, positional, keywords)

    def _builtin(self, e, name, args, positional):
        self.calls.setdefault(id(e), _Call(e, None, tuple(args)))
        return super()._builtin(e, name, args, positional)


def _calls_in_backward(model: FileModel, function: AutogradFunction, backward: cst.FunctionDef) -> list[_Call]:
    skip = leading_params(backward)
    params = [p.name.value for p in backward.params.params][skip:]
    if not params:
        return []
    walk = Walk(model, backward, FunctionRole("backward", ctx_name=params[0], owner_class=function.name))
    walker = _CallRecorder(walk, backward)
    # Everything backward receives after ctx is an incoming gradient.
    walker.bind_params({params[0]: Val(Kind.CTX), **{name: Val(Kind.TENSOR) for name in params[1:]}})
    walker.run()
    return list(walker.calls.values())


def _unordered(model: FileModel, call: _Call, exact: "_ExactSums") -> tuple[str, str] | tuple[str, str, None, str] | None:
    """(kind, shown) when the call sums in an order that changes run to run; for an extension's
    function, (kind, shown, None, where its source adds)."""
    func = call.node.func
    qualified = model.imports.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
    if qualified in _CUDA_EXT:
        return (CUDA_EXT_ATOMIC, "gradlint.cuda_ext.scatter_add") if _cuda_ext_atomic(call) else None
    if qualified in _TORCH_FUNCTIONS:
        return _tensor_op(call, _TORCH_FUNCTIONS[qualified], qualified, 1, exact)
    if qualified is not None and qualified.startswith("torch.Tensor.") and qualified[13:] in _METHODS:
        return _tensor_op(call, qualified[13:], qualified, 1, exact)
    head = (dotted(func) or "").split(".")[0]
    imported = head in model.imports.aliases
    if isinstance(func, cst.Attribute) and func.attr.value in _METHODS and not imported:
        if call.receiver is not None and call.receiver.kind in (Kind.SCALAR, Kind.MODULE, Kind.CONTAINER, Kind.CTX):
            return None
        return _tensor_op(call, func.attr.value, f"Tensor.{func.attr.value}", 0, exact)
    last = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    # An import (relative ones included) or a module-level name such as `_ext = load(...)`;
    # a def or class of this file is Python we could read, not a kernel.
    external = imported or (head in model.module_names and head not in model.functions
                            and head not in model.function_class_names and head not in model.module_class_names)
    if _names_atomic_sum(last) and external:
        return NAMED_ATOMIC_KERNEL, dotted(func) or last
    if external and _may_be_native(qualified or ""):
        native = model.native_float_atomic_add(last)
        if native is not None:
            return NATIVE_ATOMIC, dotted(func) or last, None, native[1]
    return None


# torch.ops namespaces that are torch's own: an op of any other (`torch.ops.detectron2.x`) is a
# project's custom op, whose kernels may be in its sources.
_TORCH_OP_NAMESPACES = frozenset({"aten", "prims", "prim", "quantized", "_c10d_functional", "c10d", "_quantized"})


def _may_be_native(qualified: str) -> bool:
    """Whether a call so named may be a compiled extension's function: anything but torch's own."""
    if not qualified.startswith("torch."):
        return True
    parts = qualified.split(".")
    return len(parts) >= 4 and parts[1] == "ops" and parts[2] not in _TORCH_OP_NAMESPACES


def _tensor_op(call: _Call, method: str, shown: str, shift: int, exact: "_ExactSums") -> tuple[str, str] | None:
    target = call.receiver if shift == 0 else _first(call)
    position, keyword = _METHODS[method]
    summed = _argument(call, position + shift, keyword)
    if (target is not None and target.int64) or (summed is not None and summed[1].int64):
        return None  # an integer sum is exact in any order
    if method in _INDEX_PUT:
        accumulate = _argument(call, position + 1 + shift, "accumulate")
        if accumulate is None or not _is_true(accumulate[0]):
            return None
    if method.startswith("scatter_reduce"):
        reduce = _argument(call, position + 1 + shift, "reduce")
        if reduce is None or _string(reduce[0]) not in _SUMMING_REDUCTIONS:
            return None
    if summed is not None and exact(summed[0]):
        return None
    return (THREADED_ACCUMULATE if method in _INDEX_PUT else ATOMIC_ADD), shown


def _cuda_ext_atomic(call: _Call) -> bool:
    flag = next((arg.value for arg, _ in call.args if arg.keyword is not None
                 and arg.keyword.value == "deterministic"), None)
    # True, or a value decided elsewhere, is not reported.
    return flag is None or (isinstance(flag, cst.Name) and flag.value in ("False", "None"))


def _single_assignments(function: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
    """Names bound exactly once in the function body (by `name = value`), with their value."""
    values: dict[str, cst.BaseExpression | None] = {}
    _collect_assignments(function.body, values)
    return {name: value for name, value in values.items() if value is not None}


def _collect_assignments(node: cst.CSTNode, values: dict[str, cst.BaseExpression | None]) -> None:
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return
    if isinstance(node, cst.Assign):
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                name = target.target.value
                values[name] = node.value if name not in values else None
    for child in child_nodes(node):
        _collect_assignments(child, values)


def _sums_exactly(model: FileModel, expr: cst.BaseExpression, bound: dict[str, cst.BaseExpression],
                  depth: int = 0) -> bool:
    """Whether the summed values are 0/1 or ones: a comparison, torch.ones*, a mask cast to
    float. Counting sums small integers, exact in float32 in any order (up to 2**24)."""
    if depth > 4:
        return False
    if isinstance(expr, cst.Comparison):
        return True
    if isinstance(expr, cst.Name):
        if _BOOLEAN_NAME.match(expr.value):
            return True
        value = bound.get(expr.value)
        return value is not None and _sums_exactly(model, value, bound, depth + 1)
    if isinstance(expr, (cst.Subscript, cst.UnaryOperation)):
        inner = expr.value if isinstance(expr, cst.Subscript) else expr.expression
        return _sums_exactly(model, inner, bound, depth + 1)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, (cst.Name, cst.Attribute)) and model.imports.qualify(func) in _ONES:
            return True
        if isinstance(func, cst.Attribute):
            if func.attr.value == "new_ones":
                return True
            if func.attr.value in _CASTS:
                return _sums_exactly(model, func.value, bound, depth + 1)
    return False


class _ExactSums:
    """`_sums_exactly` for one backward, its assignments read on the first question only."""

    def __init__(self, model: FileModel, backward: cst.FunctionDef):
        self.model = model
        self.backward = backward
        self.bound: dict[str, cst.BaseExpression] | None = None

    def __call__(self, expr: cst.BaseExpression) -> bool:
        if self.bound is None:
            self.bound = _single_assignments(self.backward)
        return _sums_exactly(self.model, expr, self.bound)


def _argument(call: _Call, position: int, keyword: str) -> tuple[cst.BaseExpression, Val] | None:
    if any(arg.star for arg, _ in call.args):
        return None
    positional = [(arg.value, value) for arg, value in call.args if arg.keyword is None]
    if position < len(positional):
        return positional[position]
    return next(((arg.value, value) for arg, value in call.args
                 if arg.keyword is not None and arg.keyword.value == keyword), None)


def _is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def _string(expr: cst.BaseExpression | None) -> str | None:
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _names_atomic_sum(name: str) -> bool:
    tokens = [t.lower() for t in _NAME_TOKENS.findall(name)]
    for i, token in enumerate(tokens):
        if token.startswith("atomic") and not (i and tokens[i - 1] in _NEGATIONS):
            rest = token[len("atomic"):] + "".join(tokens[:i] + tokens[i + 1:])
            return any(word in rest for word in _SUMMING_WORDS)
    return False


def _first(call: _Call) -> Val:
    if any(arg.star for arg, _ in call.args):
        return UNKNOWN
    first = next((value for arg, value in call.args if arg.keyword is None), None)
    if first is None:
        first = next((value for arg, value in call.args if arg.keyword is not None
                      and arg.keyword.value in ("input", "self")), UNKNOWN)
    return first
