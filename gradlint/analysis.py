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

In-place writes and mark_dirty (gradlint/inplace.py)
    inplace_input_writes(model, function, forward) -> ForwardInplaceWrites
        The in-place changes of forward's inputs (`InplaceWrite`: node, input, via, evidence,
        `on_a_tensor`) and the inputs forward or setup_context may mark dirty.
    inputs_without_gradient(function) -> frozenset[str]
        The inputs every return of backward answers with a literal None.

saved_tensors_hooks (gradlint/pack_hooks.py)
    pack_hooks(model) -> list[PackHook]
        Each pack hook a saved_tensors_hooks call passes, with the returns that give back the
        tensor it received.

Sums in backward (gradlint/accumulation.py)
    nondeterministic_sums_in_backward(model, function, backward) -> list[UnorderedSum]
        The calls of backward that sum floats in an order that changes run to run, by kind
        (ATOMIC_ADD, THREADED_ACCUMULATE, CUDA_EXT_ATOMIC, NAMED_ATOMIC_KERNEL).
    atomic_kernel_launches_from_backward(model) -> list[KernelLaunch]
        Launches, from backward or a helper it calls, of a Triton kernel of the file that adds
        floats with tl.atomic_add.

`.data` in Functions (gradlint/tensor_data.py)
    tensor_data_uses(model) -> list[DataUse]
        Every `<tensor>.data` read, assigned or updated in a Function's forward, setup_context
        or backward, with the statement holding it and whether it only copies or reads metadata.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from gradlint.accumulation import (
    ATOMIC_ADD,
    CUDA_EXT_ATOMIC,
    NAMED_ATOMIC_KERNEL,
    THREADED_ACCUMULATE,
    KernelLaunch,
    UnorderedSum,
    atomic_kernel_launches_from_backward,
    nondeterministic_sums_in_backward,
)
from gradlint.file_model import AutogradFunction, FileModel
from gradlint.inplace import ForwardInplaceWrites, InplaceWrite, inplace_input_writes, inputs_without_gradient
from gradlint.pack_hooks import PackHook, pack_hooks
from gradlint.tensor_data import DataUse, tensor_data_uses


def autograd_functions(model: FileModel) -> list[AutogradFunction]:
    return list(model.function_classes)


def methods_of_functions(model: FileModel, method: str) -> Iterator[tuple[AutogradFunction, cst.FunctionDef]]:
    return model.distinct_methods(method)


__all__ = [
    "ATOMIC_ADD", "CUDA_EXT_ATOMIC", "NAMED_ATOMIC_KERNEL", "THREADED_ACCUMULATE",
    "AutogradFunction", "DataUse", "FileModel", "ForwardInplaceWrites", "InplaceWrite", "KernelLaunch",
    "PackHook", "UnorderedSum",
    "atomic_kernel_launches_from_backward", "autograd_functions", "inplace_input_writes",
    "inputs_without_gradient", "methods_of_functions", "nondeterministic_sums_in_backward", "pack_hooks",
    "tensor_data_uses",
]
