"""What GL302, GL303 and GL304 say torch does is what the installed torch does (CPU only).

A GL302/GL304 message is one sentence (what is wrong, what to do); the measured why is in the
rule's doc. Both are checked here against what torch does."""

from __future__ import annotations

import os
import textwrap
import warnings
from contextlib import contextmanager

import pytest

from gradlint.engine import RuleSet, lint_source
from gradlint.registry import all_rules

torch = pytest.importorskip("torch")


def _lint(source: str, code: str):
    return [f for f in lint_source(source, "op.py", RuleSet(all_rules(), {})).findings if f.code == code]


def _doc(code: str) -> str:
    """The rule's doc as a user reads it, line breaks folded."""
    return " ".join(next(r for r in all_rules() if r.code == code).doc.split())


def _load(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "op.py", "exec"), namespace)
    return namespace


@contextmanager
def _threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def _deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


# ----- GL302 ------------------------------------------------------------------------------------

EDGE_MESSAGE = textwrap.dedent("""
    import torch
    class EdgeMessage(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, src, dst):
            ctx.save_for_backward(src, dst)
            ctx.num_nodes = x.size(0)
            return x[src] - x[dst]
        @staticmethod
        def backward(ctx, grad_msg):
            src, dst = ctx.saved_tensors
            grad_x = grad_msg.new_zeros(ctx.num_nodes, grad_msg.size(1))
            grad_x.index_add_(0, src, grad_msg)
            expanded = dst.unsqueeze(1).expand_as(grad_msg)
            grad_x.scatter_add_(0, expanded, -grad_msg)
            grad_x = grad_x.scatter_reduce(0, expanded, grad_msg, "sum")
            return grad_x, None, None
""")

PUT_BACKWARD = textwrap.dedent("""
    import torch
    class Pick(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, index):
            ctx.save_for_backward(index)
            ctx.rows = x.size(0)
            return x[index]
        @staticmethod
        def backward(ctx, grad):
            (index,) = ctx.saved_tensors
            grad_x = grad.new_zeros(ctx.rows)
            grad_x.index_put_((index,), grad, accumulate=True)
            return grad_x, None
""")


def _edges(n_edges: int, n_nodes: int, width: int):
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(0, n_nodes, (n_edges,), generator=generator)
    dst = torch.randint(0, n_nodes, (n_edges,), generator=generator)
    x = (torch.randn(n_nodes, width, generator=generator) * 1000).requires_grad_()
    grad = torch.randn(n_edges, width, generator=generator) * 1000
    return x, src, dst, grad


def _distinct_gradients(function, args, grad, runs: int = 20) -> int:
    seen = set()
    for _ in range(runs):
        x = args[0].detach().clone().requires_grad_()
        function.apply(x, *args[1:]).backward(grad)
        seen.add(x.grad.numpy().tobytes())
    return len(seen)


def test_deterministic_mode_switch_the_rule_advises_is_in_the_installed_torch():
    [message, *_] = [f.message for f in _lint(EDGE_MESSAGE, "GL302")]
    assert message.endswith("set use_deterministic_algorithms(True)")
    assert 'lists it among the operations that "will act deterministically when mode=True"' in _doc("GL302")
    doc = " ".join(torch.use_deterministic_algorithms.__doc__.split())
    assert "will act deterministically when ``mode=True``" in doc
    switches, raises = doc.split("The following normally-nondeterministic operations will throw a", 1)
    for listed in (":func:`torch.Tensor.scatter_add_` when called on a CUDA tensor",
                   ":func:`torch.index_add` when called on CUDA tensor",
                   "``reduce='sum'`` or ``reduce='mean'`` and called on CUDA tensor",
                   ":func:`torch.Tensor.index_put` with ``accumulate=True`` when called on a CPU"):
        assert listed in switches and listed not in raises, listed


def test_index_add_scatter_add_and_scatter_reduce_in_backward_sum_in_a_fixed_order_on_cpu():
    findings = _lint(EDGE_MESSAGE, "GL302")
    assert [f.message.split(" in backward")[0] for f in findings] == [
        "`Tensor.index_add_`", "`Tensor.scatter_add_`", "`Tensor.scatter_reduce`"]
    assert all("uses atomicAdd on CUDA, so gradients vary" in f.message for f in findings)
    assert "On CPU these three sum in a fixed order (measured, torch 2.13: bitwise equal over 20 runs)" in _doc("GL302")
    function = _load(EDGE_MESSAGE)["EdgeMessage"]
    x, src, dst, grad = _edges(200_000, 4, 2)
    with _threads(2):
        assert _distinct_gradients(function, (x, src, dst), grad) == 1


def test_index_put_accumulate_in_backward_varies_on_cpu_until_deterministic_mode():
    [finding] = _lint(PUT_BACKWARD, "GL302")
    assert finding.message == ("`Tensor.index_put_(accumulate=True)` in backward: thread order varies gradients; "
                               "set use_deterministic_algorithms(True)")
    doc = _doc("GL302")
    assert "2 threads, 2000000 float32 values summed into 4 slots gave 20 different results in 20 runs" in doc
    assert "under `torch.use_deterministic_algorithms(True)` it gave one" in doc
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPU threads")
    function = _load(PUT_BACKWARD)["Pick"]
    generator = torch.Generator().manual_seed(0)
    x = torch.zeros(4, requires_grad=True)
    # 2,000,000 values: with 200,000 the two threads seldom add at once on a loaded machine (measured).
    index = torch.randint(0, 4, (2_000_000,), generator=generator)
    grad = torch.randn(2_000_000, generator=generator) * 1000
    with _threads(2):
        assert _distinct_gradients(function, (x, index), grad) > 1
        with _deterministic(), warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _distinct_gradients(function, (x, index), grad) == 1


def test_integer_counts_in_backward_are_not_reported():
    source = PUT_BACKWARD.replace(
        "grad_x.index_put_((index,), grad, accumulate=True)",
        "hits = torch.zeros(ctx.rows, dtype=torch.long).index_add_(0, index, torch.ones_like(index))\n"
        "        grad_x.index_add_(0, index, (grad > 0).float())")
    assert _lint(source, "GL302") == []
    function = _load(source)["Pick"]
    x = torch.zeros(4, requires_grad=True)
    index = torch.randint(0, 4, (200_000,))
    with _threads(2):
        assert _distinct_gradients(function, (x, index), torch.randn(200_000)) == 1


# ----- GL303 ------------------------------------------------------------------------------------

LINEAR = textwrap.dedent("""
    import torch
    SEEN = []
    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x @ weight
        @staticmethod
        def backward(ctx, grad):
            x, weight = ctx.saved_tensors
            SEEN.append(ctx.needs_input_grad)
            return grad @ weight.t(), x.t() @ grad
""")


def test_gradient_for_an_input_that_needs_none_is_computed_and_dropped_silently():
    unchecked = LINEAR.replace("        SEEN.append(ctx.needs_input_grad)\n", "")
    [finding] = _lint(unchecked, "GL303")
    assert "ctx.needs_input_grad" in finding.message and finding.severity.value == "note"
    assert "torch then drops it silently" in _doc("GL303")
    assert _lint(LINEAR, "GL303") == []
    namespace = _load(LINEAR)
    x, frozen = torch.randn(5, 3, requires_grad=True), torch.randn(3, 2)
    namespace["Linear"].apply(x, frozen).sum().backward()
    assert namespace["SEEN"] == [(True, False)]
    assert frozen.grad is None and x.grad is not None


# ----- GL304 ------------------------------------------------------------------------------------

RENORM = textwrap.dedent("""
    import torch
    class Renorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            w.data.div_(2.0)
            ctx.save_for_backward(x, w)
            return x * w
        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g * w, g * x
""")
RENORM_DETACHED = RENORM.replace("w.data.div_(2.0)", "w.detach().div_(2.0)")

ZERO_IN_BACKWARD = textwrap.dedent("""
    import torch
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            x.data.zero_()
            return g * 2
""")
ZERO_IN_BACKWARD_DETACHED = ZERO_IN_BACKWARD.replace("x.data.zero_()", "x.detach().zero_()")

_INPLACE_ERROR = "one of the variables needed for gradient computation has been modified by an inplace operation"


def _w_grad(source: str, name: str, value: float, *inputs) -> torch.Tensor:
    """h = w * 1 goes through the Function after `h * h` saved it: backward of `h * h` needs h as
    it was, and runs after the Function's backward (the later node runs first)."""
    w = torch.full((3,), value, requires_grad=True)
    h = w * 1.0
    squares = (h * h).sum()
    (squares + _load(source)[name].apply(*inputs, h).sum()).backward()
    return w.grad


def test_inplace_change_through_data_in_forward_gives_a_silently_wrong_gradient():
    [finding] = _lint(RENORM, "GL304")
    assert finding.message == ("`w.data` in Renorm.forward skips autograd's version check: silently wrong "
                               "gradients; use .detach()")
    assert f"the same change through `.detach()` raised `RuntimeError: {_INPLACE_ERROR}`" in _doc("GL304")
    assert _lint(RENORM_DETACHED, "GL304") == []
    # d/dw [sum(x * h) + sum(h * h)] = 1 + 2 * 2.0 = 5 with h as it was when h * h saved it.
    x = torch.ones(3, requires_grad=True)
    assert torch.equal(_w_grad(RENORM, "Renorm", 2.0, x), torch.full((3,), 3.0))
    with pytest.raises(RuntimeError, match=_INPLACE_ERROR):
        _w_grad(RENORM_DETACHED, "Renorm", 2.0, x)


def test_inplace_change_through_data_in_backward_is_not_detected_while_detach_raises():
    [finding] = _lint(ZERO_IN_BACKWARD, "GL304")
    assert "Scale.backward" in finding.message
    # true gradient: 2 + 2 * 3.0 = 8; h * h's backward found h zeroed
    assert torch.equal(_w_grad(ZERO_IN_BACKWARD, "Scale", 3.0), torch.full((3,), 2.0))
    with pytest.raises(RuntimeError, match=_INPLACE_ERROR):
        _w_grad(ZERO_IN_BACKWARD_DETACHED, "Scale", 3.0)


def test_data_shares_storage_but_not_the_version_counter():
    assert "shares the storage but not the version counter" in _doc("GL304")
    t = torch.zeros(3)
    t.data.add_(1.0)
    assert t._version == 0 and torch.equal(t, torch.ones(3))
    t.detach().add_(1.0)
    assert t._version == 1


def test_assigning_data_on_an_input_replaces_a_saved_tensor_without_a_version_bump():
    source = textwrap.dedent("""
        import torch
        class Clip(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x: torch.Tensor) -> torch.Tensor:
                x.data = x.data.clamp(max=1.0)
                return x * 2
            @staticmethod
            def backward(ctx, g):
                return g * 2
    """)
    [finding] = _lint(source, "GL304")
    assert finding.message.startswith("assigning `x.data` in Clip.forward")
    assert "replaced through `x.data = ...`, gave a wrong gradient with no error" in _doc("GL304")
    # true gradient: 2 * 3.0 + 2 = 8; h * h's backward found h replaced by 1.0
    assert torch.equal(_w_grad(source, "Clip", 3.0), torch.full((3,), 4.0))
