"""GL204 and GL207 messages say what torch does: run the flagged code under the installed torch."""

from __future__ import annotations

import gc
import textwrap
import weakref

import pytest

from gradlint.engine import RuleSet, lint_source
from gradlint.registry import all_rules

torch = pytest.importorskip("torch")


def _findings(source: str, code: str):
    return [f for f in lint_source(source, "op.py", RuleSet(all_rules(), {})).findings if f.code == code]


def _load(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "op.py", "exec"), namespace)
    return namespace


DOUBLE_INPLACE = textwrap.dedent("""
    import torch
    class DoubleInplace(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            return x
        @staticmethod
        def backward(ctx, grad):
            return grad * 2
""")
DOUBLE_MARKED = DOUBLE_INPLACE.replace("x.mul_(2)", "x.mul_(2)\n        ctx.mark_dirty(x)")
assert "mark_dirty" in DOUBLE_MARKED


def test_inplace_input_change_raises_nothing_and_gives_silently_wrong_gradients():
    [finding] = _findings(DOUBLE_INPLACE, "GL204")
    assert "torch raises nothing" in finding.message and "silently wrong gradients" in finding.message
    assert finding.subject == "DoubleInplace.x" and finding.severity.value == "error"
    assert _findings(DOUBLE_MARKED, "GL204") == []

    def grad_of_out_plus_input(source: str) -> list[float]:
        a = torch.ones(3, requires_grad=True)
        x = a * 1
        out = _load(source)["DoubleInplace"].apply(x)
        (out + x).sum().backward()  # both terms are 2a: d/da is 4
        return a.grad.tolist()

    assert grad_of_out_plus_input(DOUBLE_INPLACE) == [3.0, 3.0, 3.0]
    assert grad_of_out_plus_input(DOUBLE_MARKED) == [4.0, 4.0, 4.0]


def test_inplace_change_of_a_leaf_that_requires_grad_is_silent_inside_forward():
    [finding] = _findings(DOUBLE_INPLACE, "GL204")
    assert "even on a leaf that requires grad" in finding.message
    leaf = torch.ones(3, requires_grad=True)
    _load(DOUBLE_INPLACE)["DoubleInplace"].apply(leaf)
    assert leaf.detach().tolist() == [2.0, 2.0, 2.0] and leaf.is_leaf
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        leaf.mul_(2)  # the same change outside forward
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in an in-place operation"):
        _load(DOUBLE_MARKED)["DoubleInplace"].apply(torch.ones(3, requires_grad=True))


def test_inplace_change_of_an_input_an_earlier_op_saved_fails_in_backward():
    [finding] = _findings(DOUBLE_INPLACE, "GL204")
    a = torch.ones(3, requires_grad=True)
    w = torch.full((3,), 2.0, requires_grad=True)
    x = a * 1
    h = x * w  # mul saves x
    out = _load(DOUBLE_INPLACE)["DoubleInplace"].apply(x)
    with pytest.raises(RuntimeError) as raised:
        (h + out).sum().backward()
    torch_text = str(raised.value).split(":")[0]
    assert torch_text == "one of the variables needed for gradient computation has been modified by an inplace operation"
    assert torch_text in finding.message


PACK_RETURNS_INPUT = textwrap.dedent("""
    import torch
    from torch.autograd.graph import saved_tensors_hooks
    def pack(t):
        return t
    def unpack(t):
        return t
    def run(x):
        with saved_tensors_hooks(pack, unpack):
            return x.exp()
""")
PACK_DETACHES = PACK_RETURNS_INPUT.replace("    return t\ndef unpack", "    return t.detach()\ndef unpack")
assert PACK_DETACHES != PACK_RETURNS_INPUT


def _outputs_alive_after_collect(source: str, backward: bool, steps: int = 10) -> int:
    run = _load(source)["run"]
    refs = []
    for _ in range(steps):
        y = run(torch.randn(1000, requires_grad=True) * 1)
        refs.append(weakref.ref(y.untyped_storage()))
        if backward:
            y.sum().backward()
        del y
    gc.collect()
    return sum(r() is not None for r in refs)


def test_pack_hook_returning_its_input_leaks_the_output_when_backward_never_runs():
    [finding] = _findings(PACK_RETURNS_INPUT, "GL207")
    assert "never freed, not even by gc.collect()" in finding.message and "t.detach()" in finding.message
    assert finding.line == 5 and finding.subject == "pack"
    assert _outputs_alive_after_collect(PACK_RETURNS_INPUT, backward=False) == 10
    assert _outputs_alive_after_collect(PACK_RETURNS_INPUT, backward=True) == 0


def test_pack_hook_returning_detach_leaks_nothing_and_keeps_the_gradients():
    assert _findings(PACK_DETACHES, "GL207") == []
    assert _outputs_alive_after_collect(PACK_DETACHES, backward=False) == 0
    x = torch.randn(5, requires_grad=True)
    _load(PACK_DETACHES)["run"](x).sum().backward()
    assert torch.allclose(x.grad, x.detach().exp())


def test_pack_hook_returning_its_input_does_not_leak_an_input_saved_op():
    """Why the message names ops that save their own output: `sin` saves its input, no cycle."""
    source = PACK_RETURNS_INPUT.replace("x.exp()", "x.sin()")
    assert len(_findings(source, "GL207")) == 1  # the hook is still wrong for exp, relu, softmax...
    assert _outputs_alive_after_collect(source, backward=False) == 0
