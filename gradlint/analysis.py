"""The questions a rule asks of a file: the one module rules import their analysis from.

A rule turns answers into findings and never walks syntax itself (tests/test_analysis_api.py
checks that). Each question takes the file's `FileModel` (and, where it is about one Function,
that Function and the def in question) and answers in plain frozen dataclasses whose fields say
what a user would: the node to report, the input it concerns, how sure the analysis is.

The Functions of a file
    autograd_functions(model) -> list[AutogradFunction]
        Every custom autograd Function: a `torch.autograd.Function` subclass or a
        `torch.library.custom_op` with `register_autograd`.
    methods_of_functions(model, "forward" | "backward" | "setup_context")
        -> Iterator[(AutogradFunction, def)]: each Function with that method, each def once
        (a subclass that inherits its base's method does not give it twice).

How a Function is declared and called (static_methods.py, function_calls.py, apply_arguments.py)
    methods_missing_staticmethod(model) -> list[NonStaticMethod]
        forward, backward, setup_context, jvp or vmap defined in a Function class without
        @staticmethod, with where it goes and whether adding it is safe (no __init__).
    direct_forward_calls(model) -> list[DirectForwardCall]
        `MyFn.forward(...)` outside the Function and its subclasses, with the `MyFn.apply(...)`
        that replaces it (None when the first argument is not positional).
    function_instantiations(model) -> list[FunctionInstantiation]
        `MyFn()` on a Function class, and whether the instance is called on the spot.
    containers_passed_to_apply(model) -> list[ContainerArgument]
        `MyFn.apply(...)` given tensors inside a list, tuple or dict, where no gradient reaches
        them: known from the container's members or from how forward uses that argument.

Tensors on ctx (gradlint/ctx_stores.py)
    tensors_kept_on_ctx(model) -> list[CtxStore]
        Each ctx attribute store of a tensor or a container of tensors in a Function, by what
        it keeps (OUTPUT, VIEW of the output, CONTAINER of outputs, TENSOR), whether ctx holds
        two or more outputs of one call, and the edits that save it with save_for_backward.

What a Function saves (gradlint/saved_tensors.py)
    repeated_saves(model) -> list[RepeatedSave]
        The save_for_backward calls made when an earlier one may already have run on the same
        path of forward or setup_context: saved_tensors keeps only the last call's tensors.
    int64_index_saves(model) -> list[Int64Save]
        The save_for_backward calls given an int64 index, and the ctx attributes set to one.
    saved_output_views(model) -> list[SavedOutputView]
        The save_for_backward calls that keep a view of the Function's own output (one that
        does not copy and whose output is not marked non-differentiable).

In-place writes and mark_dirty (gradlint/inplace.py)
    inplace_input_writes(model, function, forward) -> ForwardInplaceWrites
        The in-place changes of forward's inputs (`InplaceWrite`: node, input, via, evidence,
        helper, `on_a_tensor`), made in forward or by a def it hands the input to (of the file or
        of another project module), and the inputs forward or setup_context may mark dirty.
    inputs_without_gradient(function) -> frozenset[str]
        The inputs every return of backward answers with a literal None.

`.data` in Functions (gradlint/tensor_data.py)
    tensor_data_uses(model) -> list[DataUse]
        Every `<tensor>.data` read, assigned or updated in a Function's forward, setup_context
        or backward, with the statement holding it and whether it only copies or reads metadata.

What backward returns (gradlint/backward_returns.py)
    backward_return_counts(model) -> list[BackwardReturns]
        For each Function, the inputs forward takes, the gradients torch will want (more when
        an apply call passes a defaulted input), and each countable return of backward
        (`CountedReturn`: which values are None; `falls_off` when there is no return at all).

Work backward does for nothing (gradlint/needs_input_grad.py)
    unchecked_backwards(model) -> list[UncheckedBackward]
        Each backward that never reads ctx.needs_input_grad yet computes two or more gradients
        on some return (not None, not an incoming gradient passed through, not one fused call).

Sums in backward (gradlint/accumulation.py)
    nondeterministic_sums_in_backward(model, function, backward) -> list[UnorderedSum]
        The calls of backward that sum floats in an order that changes run to run, by kind
        (ATOMIC_ADD, THREADED_ACCUMULATE, CUDA_EXT_ATOMIC, NAMED_ATOMIC_KERNEL, NATIVE_ATOMIC: an
        extension's function whose C++/CUDA source in the project adds floats atomically).
    atomic_kernel_launches_from_backward(model) -> list[KernelLaunch]
        Launches, from backward or a helper it calls, of a Triton kernel of the file that adds
        floats with tl.atomic_add.

saved_tensors_hooks (gradlint/pack_hooks.py)
    pack_hooks(model) -> list[PackHook]
        Each pack hook a saved_tensors_hooks call passes, with the returns that give back the
        tensor it received.

The calls of a training step (gradlint/training_steps.py)
    training_step_calls(model, "torch.cuda.empty_cache") -> list[CallSite]
        The calls to that function (as the imports resolve it) made once per training step: in
        a training loop, a step function, or a Function's or Module's forward; `periodic` when
        they run only every so many steps (`if step % 100 == 0:`).
    retained_last_backwards(model) -> list[RetainedBackward]
        The backward(retain_graph=True) calls of a training step that no later backward of the
        step needs, with the state the step carries into the next one.

What a Module's forward keeps (gradlint/module_state.py)
    graph_kept_by_module_forward(model) -> list[KeptGraph]
        Each graph-attached tensor a Module's forward (or a method it runs) stores, with grad
        enabled, on self (SELF_ATTRIBUTE), in a container on self (SELF_CONTAINER) or in a
        global (GLOBAL), with whether each step's graph chains onto the last.

Graphs kept past the step (gradlint/graph_containers.py, gradlint/chained_totals.py)
    graph_kept_in_containers(model) -> list[ContainerKeep]
        Each append, extend, insert or keyed store of a graph-attached tensor into a list or dict
        that outlives the training step (not one backward later needs, not a Module's own
        activations), a helper's store given once, with the `.item()`/`.detach()` rewrite of
        the value (`KeptInstead`) where that is still right code.
    graph_chained_totals(model) -> list[ChainedTotal]
        Each `total += loss`, `total = total + loss` and state updated from itself that chains
        every step's graph onto a holder outliving the step (not one backward is called on, not
        one reset on every step), with the reset that bounds it on some steps and the rewrite of
        the added value.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from gradlint.accumulation import (
    ATOMIC_ADD,
    CUDA_EXT_ATOMIC,
    NAMED_ATOMIC_KERNEL,
    NATIVE_ATOMIC,
    THREADED_ACCUMULATE,
    KernelLaunch,
    UnorderedSum,
    atomic_kernel_launches_from_backward,
    nondeterministic_sums_in_backward,
)
from gradlint.apply_arguments import ContainerArgument, containers_passed_to_apply
from gradlint.backward_returns import BackwardReturns, CountedReturn, backward_return_counts
from gradlint.call_sites import CallSite
from gradlint.chained_totals import ChainedTotal, graph_chained_totals
from gradlint.ctx_stores import CONTAINER, OUTPUT, TENSOR, VIEW, CtxStore, tensors_kept_on_ctx
from gradlint.file_model import AutogradFunction, FileModel
from gradlint.function_calls import (
    DirectForwardCall,
    FunctionInstantiation,
    direct_forward_calls,
    function_instantiations,
)
from gradlint.graph_containers import ContainerKeep, KeptInstead, graph_kept_in_containers
from gradlint.inplace import ForwardInplaceWrites, InplaceWrite, inplace_input_writes, inputs_without_gradient
from gradlint.module_state import GLOBAL, SELF_ATTRIBUTE, SELF_CONTAINER, KeptGraph, graph_kept_by_module_forward
from gradlint.needs_input_grad import UncheckedBackward, unchecked_backwards
from gradlint.pack_hooks import PackHook, pack_hooks
from gradlint.saved_tensors import (
    Int64Save,
    RepeatedSave,
    SavedOutputView,
    int64_index_saves,
    repeated_saves,
    saved_output_views,
)
from gradlint.static_methods import NonStaticMethod, methods_missing_staticmethod
from gradlint.tensor_data import DataUse, tensor_data_uses
from gradlint.training_steps import RetainedBackward, retained_last_backwards, training_step_calls


def autograd_functions(model: FileModel) -> list[AutogradFunction]:
    return list(model.function_classes)


def methods_of_functions(model: FileModel, method: str) -> Iterator[tuple[AutogradFunction, cst.FunctionDef]]:
    return model.distinct_methods(method)


__all__ = [
    "ATOMIC_ADD", "CONTAINER", "CUDA_EXT_ATOMIC", "GLOBAL", "NAMED_ATOMIC_KERNEL", "NATIVE_ATOMIC", "OUTPUT", "SELF_ATTRIBUTE",
    "SELF_CONTAINER", "TENSOR", "THREADED_ACCUMULATE", "VIEW",
    "AutogradFunction", "BackwardReturns", "CallSite", "ChainedTotal", "ContainerArgument", "ContainerKeep",
    "CountedReturn", "CtxStore", "DataUse", "DirectForwardCall", "FileModel", "ForwardInplaceWrites",
    "FunctionInstantiation", "InplaceWrite", "Int64Save", "KeptGraph", "KeptInstead", "KernelLaunch",
    "NonStaticMethod", "PackHook", "RepeatedSave", "RetainedBackward", "SavedOutputView", "UncheckedBackward",
    "UnorderedSum",
    "atomic_kernel_launches_from_backward", "autograd_functions", "backward_return_counts",
    "containers_passed_to_apply", "direct_forward_calls", "function_instantiations", "graph_chained_totals",
    "graph_kept_by_module_forward", "graph_kept_in_containers", "inplace_input_writes", "inputs_without_gradient",
    "int64_index_saves", "methods_missing_staticmethod", "methods_of_functions",
    "nondeterministic_sums_in_backward", "pack_hooks", "repeated_saves", "retained_last_backwards",
    "saved_output_views", "tensor_data_uses", "tensors_kept_on_ctx", "training_step_calls", "unchecked_backwards",
]
