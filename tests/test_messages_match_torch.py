"""What the messages claim is what torch does: run the flagged code under the installed torch."""

from __future__ import annotations

import gc
import re
import textwrap
import weakref

import pytest

from gradlint.engine import RuleSet, lint_source
from gradlint.registry import all_rules, rule_by_code

torch = pytest.importorskip("torch")



def _lint(source: str):
    rules = all_rules()
    return lint_source(source, "op.py", RuleSet(rules, {})).findings


def _load(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "op.py", "exec"), namespace)
    return namespace


TOO_FEW = textwrap.dedent("""
    import torch
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor
        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor
""")

EXTRA_TENSOR = textwrap.dedent("""
    import torch
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y
        @staticmethod
        def backward(ctx, grad):
            return grad, grad, grad
""")

CUSTOM_OP = textwrap.dedent("""
    import torch
    @torch.library.custom_op("gltest::scaled", mutates_args=())
    def scaled(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * w
    @scaled.register_fake
    def _(x, w):
        return torch.empty_like(x)
    def backward(ctx, g):
        return g
    scaled.register_autograd(backward)
""")


CUSTOM_OP_EXTRA = CUSTOM_OP.replace("    return g\n", "    return g, g, g\n")
assert CUSTOM_OP_EXTRA != CUSTOM_OP


def _torch_words(claim: str) -> str:
    """What a message's `(torch: ...)` claim says torch's error contains."""
    if claim.startswith("a gradient at position "):
        return f"returned a gradient different than None at position {claim.rsplit(' ', 1)[1]},"
    return f"({claim})"  # "expected 2, got 1"


def _error_form(torch_text: str) -> str:
    """torch's error as a pattern of its form: any node name, any counts or position."""
    parts = re.split(r"(function \S+ returned|\d+)", torch_text)
    return "".join(re.escape(part) if i % 2 == 0 else r"function \w+ returned" if part.startswith("function")
                   else r"\d+" for i, part in enumerate(parts))


@pytest.mark.parametrize("source, call", [
    (TOO_FEW, lambda ns: ns["Scale"].apply(torch.ones(3, requires_grad=True), 2.0)),
    (EXTRA_TENSOR, lambda ns: ns["Twice"].apply(torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True))),
    (CUSTOM_OP, lambda ns: ns["scaled"](torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True))),
    (CUSTOM_OP_EXTRA, lambda ns: ns["scaled"](torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True))),
], ids=["too-few", "extra-tensor", "custom-op", "custom-op-extra"])
def test_backward_count_message_gives_what_the_error_torch_raises_says(source, call):
    """The message's `(torch: ...)` is in the error torch raises, and the doc quotes that error's form."""
    findings = [f for f in _lint(source) if f.code == "GL201"]
    assert len(findings) == 1
    namespace = _load(source)
    with pytest.raises(RuntimeError) as raised:
        call(namespace).sum().backward()
    torch_text = str(raised.value).splitlines()[0]
    [claim] = re.findall(r"\(torch: ([^)]*)\)", findings[0].message)
    assert _torch_words(claim) in torch_text, (claim, torch_text)
    assert re.search(_error_form(torch_text), rule_by_code("GL201").doc), torch_text


OWN_OUTPUT = textwrap.dedent("""
    import torch
    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = x.exp()
            ctx.out = out
            return out
        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.out
""")

VIEW_OF_OUTPUT = OWN_OUTPUT.replace("ctx.out = out", "ctx.out = out[1:]").replace("grad * ctx.out", "grad")
INPUT_ON_CTX = OWN_OUTPUT.replace("ctx.out = out", "ctx.out = x").replace("grad * ctx.out", "grad * ctx.out.exp()")


def _storage_alive_after(source: str) -> tuple[bool, bool]:
    """Run the op once with the collector off, drop everything: (alive after del, alive after gc)."""
    namespace = _load(source)
    gc.disable()
    try:
        x = torch.randn(1000, requires_grad=True)
        out = namespace["Keep"].apply(x)
        ref = weakref.ref(out.untyped_storage())
        del out
        alive_after_del = ref() is not None
        gc.collect()
        return alive_after_del, ref() is not None
    finally:
        gc.enable()


def test_own_output_on_ctx_is_freed_only_by_the_cyclic_collector():
    [finding] = [f for f in _lint(OWN_OUTPUT) if f.code == "GL101"]
    assert "cyclic collector frees" in finding.message and finding.severity.value == "error"
    assert _storage_alive_after(OWN_OUTPUT) == (True, False)


def test_view_of_output_on_ctx_is_a_permanent_leak():
    [finding] = [f for f in _lint(VIEW_OF_OUTPUT) if f.code == "GL101"]
    assert "never freed" in finding.message and finding.severity.value == "error"
    assert _storage_alive_after(VIEW_OF_OUTPUT) == (True, True)


SAVED_VIEW = OWN_OUTPUT.replace("ctx.out = out", "ctx.save_for_backward(out[1:])").replace(
    "grad * ctx.out", "grad * ctx.saved_tensors[0].sum()")
SAVED_WHOLE = SAVED_VIEW.replace("save_for_backward(out[1:])", "save_for_backward(out)")


def _outputs_alive(source: str, backward: bool, calls: int = 20) -> int:
    """How many of `calls` outputs are still alive after gc.collect(), the collector on."""
    namespace = _load(source)
    refs = []
    for _ in range(calls):
        x = torch.randn(64, requires_grad=True)
        out = namespace["Keep"].apply(x)
        refs.append(weakref.ref(out.untyped_storage()))
        if backward:
            out.sum().backward()
        del out, x
    gc.collect()
    return sum(r() is not None for r in refs)


def test_a_saved_view_of_the_output_leaks_for_good_only_when_backward_never_runs():
    [finding] = [f for f in _lint(SAVED_VIEW) if f.code == "GL107"]
    assert "leaked if backward never runs" in finding.message and finding.severity.value == "error"
    assert "still alive after `gc.collect()`" in rule_by_code("GL107").doc
    assert _outputs_alive(SAVED_VIEW, backward=False) == 20
    assert _outputs_alive(SAVED_VIEW, backward=True) == 0
    assert [f for f in _lint(SAVED_WHOLE) if f.code == "GL107"] == []
    assert _outputs_alive(SAVED_WHOLE, backward=False) == 0


TWO_OUTPUTS = textwrap.dedent("""
    import torch
    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            a, b = x.exp(), x * 2
            ctx.a = a
            ctx.b = b
            return a, b
        @staticmethod
        def backward(ctx, ga, gb):
            return ga * ctx.a + gb * 2
""")


def test_two_outputs_on_ctx_are_a_permanent_leak():
    findings = [f for f in _lint(TWO_OUTPUTS) if f.code == "GL101"]
    assert len(findings) == 2
    assert all("never freed" in f.message and f.severity.value == "error" for f in findings)
    namespace = _load(TWO_OUTPUTS)
    gc.disable()
    try:
        a, b = namespace["Keep"].apply(torch.randn(1000, requires_grad=True))
        refs = [weakref.ref(a.untyped_storage()), weakref.ref(b.untyped_storage())]
        del a, b
        gc.collect()
        assert [r() is not None for r in refs] == [True, True]
    finally:
        gc.enable()


ONE_MARKED_NON_DIFFERENTIABLE = TWO_OUTPUTS.replace(
    "        ctx.a = a\n", "        ctx.mark_non_differentiable(b)\n        ctx.a = a\n")
assert ONE_MARKED_NON_DIFFERENTIABLE != TWO_OUTPUTS


def test_an_output_marked_non_differentiable_makes_no_second_cycle():
    by_attr = {f.message.split()[0]: f for f in _lint(ONE_MARKED_NON_DIFFERENTIABLE) if f.code == "GL101"}
    assert "cyclic collector frees" in by_attr["ctx.a"].message
    assert by_attr["ctx.b"].severity.value == "warning"
    namespace = _load(ONE_MARKED_NON_DIFFERENTIABLE)
    gc.disable()
    try:
        a, b = namespace["Keep"].apply(torch.randn(1000, requires_grad=True))
        ref = weakref.ref(a.untyped_storage())
        del a, b
        gc.collect()
        assert ref() is None
    finally:
        gc.enable()


def test_input_on_ctx_forms_no_cycle_and_is_a_warning():
    [finding] = [f for f in _lint(INPUT_ON_CTX) if f.code == "GL101"]
    assert finding.severity.value == "warning" and "version-counter" in finding.message
    assert _storage_alive_after(INPUT_ON_CTX) == (False, False)


NOT_STATIC = textwrap.dedent("""
    import torch
    class Twice(torch.autograd.Function):
        def forward(ctx, x):
            return x * 2
        @staticmethod
        def backward(ctx, g):
            return g * 2
""")


def test_instantiated_function_raises_the_legacy_error_the_message_quotes():
    source = NOT_STATIC + "y = Twice()(x)\n"
    findings = [f for f in _lint(source) if f.code == "GL202"]
    assert len(findings) == 2  # the def without @staticmethod and the instantiation
    namespace = _load(NOT_STATIC)
    x = torch.ones(3, requires_grad=True)
    assert torch.equal(namespace["Twice"].apply(x), x * 2)  # works through apply, as the message says
    assert "works only through apply()" in findings[0].message
    with pytest.warns(DeprecationWarning), pytest.raises(RuntimeError) as raised:
        namespace["Twice"]()(x)
    assert "calling the instance raises" in findings[1].message
    # The doc quotes the error (the message is one line; the quote is the doc's).
    assert str(raised.value).split(" (Example")[0] in rule_by_code("GL202").doc


def test_forward_called_directly_bypasses_the_custom_backward():
    source = NOT_STATIC.replace("    def forward", "    @staticmethod\n    def forward") + "y = Twice.forward(None, x)\n"
    [finding] = [f for f in _lint(source) if f.code == "GL205"]
    namespace = _load(source.replace("y = Twice.forward(None, x)\n", ""))
    y = namespace["Twice"].forward(None, torch.ones(3, requires_grad=True))
    assert type(y.grad_fn).__name__ == "MulBackward0"
    assert "bypasses the custom backward" in finding.message
    assert "`MulBackward0`" in rule_by_code("GL205").doc


def test_tensors_in_a_list_argument_are_not_differentiated():
    source = textwrap.dedent("""
        import torch
        class Sum(torch.autograd.Function):
            @staticmethod
            def forward(ctx, xs):
                return torch.stack(xs).sum(0)
            @staticmethod
            def backward(ctx, g):
                return None
        def run(a, b):
            return Sum.apply([a, b])
    """)
    [finding] = [f for f in _lint(source) if f.code == "GL206"]
    namespace = _load(source)
    out = namespace["run"](torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True))
    assert out.requires_grad is False
    assert "no gradient reaches them" in finding.message
    doc = " ".join(rule_by_code("GL206").doc.split())
    assert "The output requires grad only through tensors passed as arguments of their own" in doc
    assert "with none, it comes back with `requires_grad=False`" in doc


def test_a_tensor_passed_beside_the_list_still_makes_the_output_require_grad():
    # What the GL206 doc says of the output (an audit found "does not require grad" false).
    source = textwrap.dedent("""
        import torch
        class Mix(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, ws):
                return x * ws[0]
            @staticmethod
            def backward(ctx, g):
                return g, None
    """)
    mix = _load(source)["Mix"]
    x, w = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    out = mix.apply(x, [w])
    assert out.requires_grad is True
    out.sum().backward()
    assert x.grad is not None and w.grad is None


def test_second_save_for_backward_replaces_the_first():
    source = textwrap.dedent("""
        import torch
        class Keep(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                ctx.save_for_backward(x)
                ctx.save_for_backward(y)
                return x * y
            @staticmethod
            def backward(ctx, g):
                return g, g
    """)
    [finding] = [f for f in _lint(source) if f.code == "GL203"]
    namespace = _load(source)
    x, y = torch.ones(2, requires_grad=True), torch.full((2,), 3.0, requires_grad=True)
    out = namespace["Keep"].apply(x, y)
    assert len(out.grad_fn.saved_tensors) == 1 and torch.equal(out.grad_fn.saved_tensors[0], y)
    assert "only the last call's tensors" in finding.message
