"""GL204 and GL207 say what torch does: run the flagged code under the installed torch.

A finding's message is one sentence (what is wrong, what to do); the measured why is in the
rule's doc. Both are checked here against what torch does."""

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


def _doc(code: str) -> str:
    """The rule's doc as a user reads it, line breaks folded."""
    return " ".join(next(r for r in all_rules() if r.code == code).doc.split())


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
    assert finding.message == ("input `x` changed in place without ctx.mark_dirty: silently wrong gradients; "
                               "mark it dirty or clone it")
    assert finding.subject == "DoubleInplace.x" and finding.severity.value == "error"
    assert "gives `a.grad == 3` where the values computed need 4 (4 with `mark_dirty`)" in _doc("GL204")
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
    assert len(_findings(DOUBLE_INPLACE, "GL204")) == 1
    doc = _doc("GL204")
    assert "raises nothing and warns nothing, even on a leaf that requires grad" in doc
    leaf = torch.ones(3, requires_grad=True)
    _load(DOUBLE_INPLACE)["DoubleInplace"].apply(leaf)
    assert leaf.detach().tolist() == [2.0, 2.0, 2.0] and leaf.is_leaf
    with pytest.raises(RuntimeError) as outside:
        leaf.mul_(2)  # the same change outside forward
    with pytest.raises(RuntimeError) as marked:
        _load(DOUBLE_MARKED)["DoubleInplace"].apply(torch.ones(3, requires_grad=True))
    # The doc quotes torch's own words for both.
    assert f"outside forward the same call raises `{outside.value}`" in doc
    assert f"torch then refuses the change (`{marked.value}`)" in doc


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
    assert f"backward fails with `{torch_text}" in _doc("GL204")
    assert "silently wrong" in finding.message and "ctx.mark_dirty" in finding.message


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
    assert finding.message == ("pack hook `pack` returns its input: saved outputs leak, even past gc, if backward "
                               "never runs; return t.detach()")
    assert "50 of 50 outputs of `exp` were still alive after `gc.collect()`" in _doc("GL207")
    assert finding.line == 5 and finding.subject == "pack"
    assert _outputs_alive_after_collect(PACK_RETURNS_INPUT, backward=False) == 10
    assert _outputs_alive_after_collect(PACK_RETURNS_INPUT, backward=True) == 0


def test_pack_hook_returning_detach_leaks_nothing_and_keeps_the_gradients():
    assert _findings(PACK_DETACHES, "GL207") == []
    assert "Returning `t.detach()` leaks nothing, with the same gradients" in _doc("GL207")
    assert _outputs_alive_after_collect(PACK_DETACHES, backward=False) == 0
    x = torch.randn(5, requires_grad=True)
    _load(PACK_DETACHES)["run"](x).sum().backward()
    assert torch.allclose(x.grad, x.detach().exp())


def test_pack_hook_returning_its_input_does_not_leak_an_input_saved_op():
    """Why the doc names ops that save their own output: `sin` saves its input, no cycle."""
    assert "when an op saves its own output (`exp`, `sigmoid`, `tanh`, `relu`" in _doc("GL207")
    source = PACK_RETURNS_INPUT.replace("x.exp()", "x.sin()")
    assert len(_findings(source, "GL207")) == 1  # the hook is still wrong for exp, relu, softmax...
    assert _outputs_alive_after_collect(source, backward=False) == 0
