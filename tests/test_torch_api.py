"""The tables in gradlint/torch_api.py that come from measuring torch, re-measured on the installed one."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradlint import torch_api as api


def _non_tensor_types():
    import torch.distributed as dist  # noqa: F401 - ProcessGroup and Work live in its C module
    from torch._C._distributed_c10d import ProcessGroup, Work

    return (np.ndarray, list, dict, str, bytes, tuple, set, torch.nn.Module, torch.Size, torch.Generator,
            torch.futures.Future, ProcessGroup, Work)


def test_methods_shared_with_non_tensors_are_exactly_those_other_types_have():
    shared = set()
    for kind in _non_tensor_types():
        shared |= set(dir(kind))
    assert api.SHARED_WITH_NON_TENSORS == (api.TENSOR_ONLY_METHODS | api.INPLACE_TENSOR_METHODS) & shared


def test_every_tensor_method_in_the_tables_is_a_real_tensor_method():
    assert {m for m in api.TENSOR_ONLY_METHODS | api.INPLACE_TENSOR_METHODS if not hasattr(torch.Tensor, m)} == set()


def test_keepdim_is_a_keyword_of_tensor_methods_only():
    """Every tensor reduction that takes `keepdim` is a method no other type a Function is given
    has, but NumPy's arrays, whose methods refuse the keyword (theirs is `keepdims`)."""
    x = torch.zeros(2, 2)
    takes = set()
    for name in dir(torch.Tensor):
        method = getattr(torch.Tensor, name)  # from the class: a property is not read
        if name.startswith("_") or name.endswith("_") or not callable(method):
            continue
        try:
            method(x, dim=0, keepdim=True)
        except Exception:  # noqa: BLE001 - most methods take other arguments: not one of these
            continue
        takes.add(name)
    assert {"sum", "mean", "amax", "max", "std", "logsumexp"} <= takes
    array = np.zeros((2, 2))
    for kind in _non_tensor_types():
        for name in takes & set(dir(kind)):
            assert kind is np.ndarray, (kind, name)
            with pytest.raises(TypeError):
                getattr(array, name)(axis=0, keepdim=True)
    assert api.TENSOR_PROOF_KEYWORDS == {"keepdim"}


def test_graph_free_ops_give_results_that_never_require_grad():
    x = torch.randn(8, requires_grad=True)
    y = torch.randn(8, requires_grad=True)
    counts = (x.detach() * 0).long()
    boundaries = torch.sort(x.detach())[0]
    given = {"bincount": (counts,), "searchsorted": (boundaries, y), "bucketize": (y, boundaries)}
    for name in api.GRAPH_FREE_OPS:
        args = given.get(name, (x, y) if name in ("eq", "ne", "lt", "le", "gt", "ge", "isclose", "logical_and",
                                                  "logical_or", "logical_xor") else (x,))
        assert not getattr(torch, name)(*args).requires_grad, name
        if hasattr(torch.Tensor, name):
            assert not getattr(args[0], name)(*args[1:]).requires_grad, name
    # What the table leaves out does carry a graph: rounding, a sign, unique values.
    for name in ("round", "sign", "floor", "unique"):
        assert getattr(torch, name)(x).requires_grad, name


def test_a_process_group_has_size_so_size_proves_nothing():
    from torch._C._distributed_c10d import ProcessGroup

    assert hasattr(ProcessGroup, "size") and "size" not in api.TENSOR_PROOF_METHODS


def test_the_inner_tensors_of_torchs_subclasses_are_what_their_annotations_say():
    import typing

    for qualified, attributes in api.TENSOR_SUBCLASS_ATTRIBUTES.items():
        module, _, name = qualified.rpartition(".")
        cls = getattr(__import__(module, fromlist=[name]), name)
        hints = typing.get_type_hints(cls)
        tensors = {a for a, hint in hints.items() if torch.Tensor in typing.get_args(hint) or hint is torch.Tensor}
        assert attributes == tensors, qualified


def test_new_tensors_made_after_a_graph_attached_one_carry_no_graph():
    """flow gives `x.new_zeros(n)` and `torch.zeros_like(x)` no graph of x's (a leaf, a parameter-like
    one with requires_grad=True): what the installed torch does."""
    x = torch.randn(3, requires_grad=True) * 2
    assert x.grad_fn is not None
    for method in api.NEW_TENSOR_METHODS:
        made = getattr(x, method)([1.0, 2.0]) if method == "new_tensor" else \
            getattr(x, method)((4,), 1.0) if method == "new_full" else getattr(x, method)(4)
        assert made.grad_fn is None and not made.requires_grad, method
    for name in api.LIKE_FUNCTIONS:
        function = getattr(torch, name.rsplit(".", 1)[1])
        made = function(x, 2.0) if name == "torch.full_like" else function(x, 5) if name == "torch.randint_like" \
            else function(x)
        assert made.grad_fn is None and not made.requires_grad, name
