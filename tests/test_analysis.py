"""The shared analysis: finding autograd Functions whatever the import style, and the
conservative tensor inference the rules stand on."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from gradlint.config import Settings
from gradlint.engine import RuleSet, lint_source
from gradlint.file_model import FileModel


def model(source: str) -> FileModel:
    return FileModel(cst.parse_module(textwrap.dedent(source)))


def codes(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "t.py", RuleSet.from_settings(Settings()))
    assert result.internal_error is None
    return [(f.line, f.code) for f in result.findings]


FORWARD = """
    {imports}
    class Op({base}):
        @staticmethod
        def forward({ctx}, x):
            return x * 2
        @staticmethod
        def backward({ctx}, g):
            return g * 2
"""


@pytest.mark.parametrize("imports, base", [
    ("import torch", "torch.autograd.Function"),
    ("import torch as th", "th.autograd.Function"),
    ("from torch.autograd import Function as F", "F"),
    ("from torch import autograd", "autograd.Function"),
    ("import torch.autograd.function", "torch.autograd.function.Function"),
    ("from torch.autograd.function import InplaceFunction", "InplaceFunction"),
])
@pytest.mark.parametrize("ctx", ["ctx", "self", "context"])
def test_functions_are_found_whatever_the_import_style_and_ctx_name(imports, base, ctx):
    found = model(FORWARD.format(imports=imports, base=base, ctx=ctx)).function_classes
    assert [(f.name, f.style, len(f.forward_inputs)) for f in found] == [("Op", "ctx", 1)]


def test_a_class_named_function_from_elsewhere_is_not_an_autograd_function():
    source = FORWARD.format(imports="from sympy import Function", base="Function", ctx="ctx")
    assert model(source).function_classes == []


def test_subclass_of_a_same_file_function_inherits_forward_and_backward():
    found = model("""
        import torch
        class Sub(Base):
            pass
        class Base(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a + b
            @staticmethod
            def backward(ctx, g):
                return g, g
    """).function_classes
    assert sorted(f.name for f in found) == ["Base", "Sub"]
    assert all(f.forward is not None and f.backward is not None for f in found)


def test_custom_op_with_library_level_register_autograd():
    found = model("""
        import torch
        from torch.library import custom_op, register_autograd
        @custom_op("pc::knn", mutates_args=())
        def knn(pos: torch.Tensor, k: int) -> torch.Tensor:
            return pos
        def setup(ctx, inputs, output):
            ctx.save_for_backward(output)
        def bwd(ctx, g):
            return g, None
        register_autograd("pc::knn", bwd, setup_context=setup)
    """).function_classes
    [op] = found
    assert (op.style, op.op_name, op.setup_context.name.value, op.backward.name.value) == ("custom_op", "pc::knn", "setup", "bwd")
    assert op.backward_node_name == "GeneratedBackwardFor_pc_knn_defaultBackward"


# ----- tensor inference: what is never reported ------------------------------------------

def test_scalars_shapes_dtypes_and_scalar_like_inputs_on_ctx_are_never_reported():
    assert codes("""
        import torch
        class Op(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, idx, dim, k, num_nodes, eps=1e-6, reduce="sum", scale: float = 1.0):
                ctx.dim = dim
                ctx.k = k
                ctx.num_nodes = num_nodes
                ctx.eps, ctx.reduce, ctx.scale = eps, reduce, scale
                ctx.shape = x.shape
                ctx.n = x.size(0)
                ctx.numel = x.numel()
                ctx.norm = x.norm().item()
                ctx.dtype, ctx.device = x.dtype, x.device
                ctx.rows = len(idx)
                ctx.big = bool(x.numel() > 10)
                ctx.ids = idx.tolist()
                ctx.save_for_backward(idx)
                return x[idx]
            @staticmethod
            def backward(ctx, g):
                return g, None, None, None, None, None, None, None
    """) == []


def test_a_parameter_used_as_a_python_scalar_is_not_a_tensor():
    assert codes("""
        import torch
        class Op(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, parts, width):
                ctx.parts = parts
                ctx.width = width
                return x.view(parts, width).sum(0) + torch.zeros(width)
            @staticmethod
            def backward(ctx, g):
                return g, None, None
    """) == []


def test_detached_or_itemized_values_are_not_graph_attached():
    assert codes("""
        import torch
        history, totals = [], {}
        running = 0.0
        for x, y in loader:
            loss = model(x).sub(y).pow(2).mean()
            loss.backward()
            history.append(loss.item())
            history.append(loss.detach())
            history.append(float(loss))
            totals["last"] = loss.detach().cpu().numpy()
            running += loss.item()
            with torch.no_grad():
                history.append(model(x))
    """) == []


def test_unknown_calls_are_not_assumed_graph_attached():
    assert codes("""
        results = []
        for batch in loader:
            metrics = compute_metrics(batch)
            results.append(metrics)
            optimizer.step()
    """) == []


def test_graph_attached_via_module_call_criterion_and_backward():
    assert codes("""
        import torch
        from torch import nn
        net = nn.Linear(4, 1)
        crit = nn.MSELoss()
        kept, outs = [], []
        for x, y in loader:
            out = net(x)
            loss = crit(out, y)
            loss.backward()
            kept.append(loss)
            outs.append(out * 2)
    """) == [(11, "GL103"), (12, "GL103")]


def test_findings_name_their_holder_for_the_runtime_probe():
    from pathlib import Path

    from gradlint.check import CheckRequest, run_check

    examples = Path(__file__).resolve().parent.parent / "examples"
    findings = run_check(CheckRequest(paths=[examples], isolated=True)).findings
    assert {(f.code, f.subject) for f in findings} == {
        ("GL301", "KNNScatter"), ("GL101", "KNNScatter.ctx.out"), ("GL101", "KNNScatter.ctx.first_half"),
        ("GL201", "KNNScatter"), ("GL102", "PointEncoder.activations"), ("GL103", "losses"),
        ("GL104", "total_loss"), ("GL302", "KNNScatter.backward"),
    }


@pytest.mark.parametrize("source, subject", [
    ("""
        for x, y in loader:
            out, hidden = rnn(x, hidden)
            criterion(out, y).backward(retain_graph=True)
            optimizer.step()
    """, "hidden"),
    ("""
        class Trainer:
            def step(self, x, y):
                out, self.state = self.rnn(x, self.state)
                self.criterion(out, y).backward(retain_graph=True)
                self.optimizer.step()
    """, "Trainer.state"),
    ("""
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward(retain_graph=True)
            optimizer.step()
    """, ""),
])
def test_gl105_names_the_state_fed_back_into_the_step_for_the_runtime_probe(source, subject):
    rules = RuleSet.from_settings(Settings(select=("GL105",)))
    (finding,) = lint_source(textwrap.dedent(source), "t.py", rules).findings
    assert finding.code == "GL105" and finding.subject == subject


# ----- a helper of the file adding the caller's graph to the caller's list -----------------------

HELPER_CALLS = """
    import torch
    HISTORY = []
    def remember(value, buf=HISTORY):
        buf.append(value)
    def mixed(value, buf):
        buf.append(value + model(value).mean())
    def train(model, loader, opt, history):
        for x in loader:
            loss = model(x).mean()
            loss.backward()
            opt.step()
            remember(loss)
            remember(loss, history)
            mixed(loss, history)
"""


def test_a_helper_call_that_leaves_the_list_to_its_default_shares_no_store_with_one_that_passes_it():
    # The two calls share one cached walk of remember(): the first gives no `buf` (it crashed
    # with KeyError when second), the second must still be reported at its own line.
    lines = textwrap.dedent(HELPER_CALLS).splitlines()
    at = next(n for n, text in enumerate(lines, 1) if "remember(loss, history)" in text)
    default = next(n for n, text in enumerate(lines, 1) if "remember(loss)" in text)
    mixed = next(n for n, text in enumerate(lines, 1) if "mixed(loss, history)" in text)
    # mixed() appends to its parameter once per call: the caller's list, reported at the call that
    # passes one outliving the step (not at mixed's own line, GL103's callers_data). The call
    # that leaves `buf` to its default appends to the global HISTORY.
    assert [c for c in codes(HELPER_CALLS) if c[1] == "GL103"] == [(default, "GL103"), (at, "GL103"),
                                                                    (mixed, "GL103")]


# ----- GL104: what counts as a reset of the total ------------------------------------------------

EPOCH_AND_FIRST_STEP = """
    import torch
    TOTAL = None
    class Trainer:
        def fit(self, train_dl, epochs, scheduler):
            for epoch in range(epochs):
                self.total = 0.0
                for x, y in train_dl:
                    self.total = self.total + self.training_step(x, y)
                scheduler.step()
        def training_step(self, x, y):
            loss = self.model(x).sub(y).pow(2).mean()
            loss.backward()
            self.opt.step()
            return loss
    def step(model, x):
        global TOTAL
        loss = model(x).mean()
        loss.backward()
        if TOTAL is None:
            TOTAL = 0.0
        TOTAL = TOTAL + loss
"""


def test_a_reset_per_epoch_or_on_the_first_step_only_is_no_reset():
    # Both were taken for "reset on every step" (silent) or "on some steps" (a warning).
    result = lint_source(textwrap.dedent(EPOCH_AND_FIRST_STEP), "t.py", RuleSet.from_settings(Settings()))
    found = [(f.code, f.severity.value, "never freed" in f.message) for f in result.findings]
    assert found == [("GL104", "error", True)] * 2


# ----- a torch.compile alias, as the rules and the precheck read it ------------------------------

COMPILED = """
    import torch
    def train_step(model, opt, x):
        loss = model(x).mean()
        loss.backward()
        opt.step()
        return loss
    def eval_step(model, x):
        return 0.0
    by_keyword = torch.compile(model=train_step)
    rebound = torch.compile(train_step)
    rebound = eval_step
    def main(model, opt, loader):
        history = []
        for x in loader:
            history.append(by_keyword(model, opt, x))
            history.append(rebound(model, x))
"""


def test_a_compiled_alias_by_keyword_counts_and_a_rebound_one_does_not():
    lines = textwrap.dedent(COMPILED).splitlines()
    at = next(n for n, text in enumerate(lines, 1) if "by_keyword(model, opt, x)" in text)
    assert codes(COMPILED) == [(at, "GL103")]


def test_a_reset_on_a_condition_that_reads_the_total_is_still_a_periodic_reset():
    # `total.item() > 100` and `step % k == 0 and total is not None` read the target but are no
    # first-step guards: the total is bounded by them (a warning), not chained for ever.
    source = """
        import torch
        def fit(model, loader, opt, k):
            total = 0.0
            other = None
            for step, x in enumerate(loader):
                loss = model(x).mean()
                loss.backward()
                opt.step()
                total = total + loss
                if total.item() > 100:
                    total = 0.0
                other = loss if other is None else other + loss
                if step % k == 0 and other is not None:
                    other = None
    """
    result = lint_source(textwrap.dedent(source), "t.py", RuleSet.from_settings(Settings()))
    assert [(f.code, f.severity.value, "reset only on some steps" in f.message) for f in result.findings] \
        == [("GL104", "warning", True)] * 2


KERNEL = """
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _kernel(x_ptr, ref_ptr, mask_ptr, HAS_REF: tl.constexpr):
        pid = tl.program_id(0)
        {setup}
        if {test}:
            tl.store(x_ptr + pid, tl.load(ref_ptr + pid))

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, ref, mask):
            _kernel[(1,)](x, ref, mask, True)
            ctx.ref = ref
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad, None, None
"""


@pytest.mark.parametrize("setup, test, flagged", [
    # A test on values the kernel loaded: Triton compiles both branches, the pointer must be one.
    ("keep = tl.load(mask_ptr + pid).to(tl.int1)", "keep == 1", True),
    ("keep = tl.load(mask_ptr + pid)", "keep and pid > 0", True),
    # A constexpr flag, or a parameter (`ref_ptr is not None`), prunes the branch when compiled:
    # the launch may pass anything there.
    ("keep = tl.load(mask_ptr + pid)", "HAS_REF", False),
    ("keep = tl.load(mask_ptr + pid)", "ref_ptr is not None", False),
    ("keep = tl.load(mask_ptr + pid)", "keep == HAS_REF", False),
    # A loaded name bound some other way too may hold what a parameter gave it.
    ("keep = tl.load(mask_ptr + pid)\n        for keep in range(HAS_REF): pass", "keep == 1", False),
    ("keep = tl.load(mask_ptr + pid)\n        keep += HAS_REF", "keep == 1", False),
])
def test_a_triton_pointer_under_an_if_on_loaded_values_is_a_tensor_where_launched(setup, test, flagged):
    """fla's GRPO kernel loads ref_logp_ptr under `if not_skip == 1` (not_skip read from a mask
    pointer): ctx.ref_logp = ref_logp was quiet, as under a constexpr `if`."""
    source = KERNEL.format(setup=setup, test=test)
    line = next(n for n, text in enumerate(textwrap.dedent(source).splitlines(), 1) if "ctx.ref = ref" in text)
    assert ((line, "GL101") in codes(source)) is flagged, source


# ----- a container backward reads and another method empties (REINFORCE) ------------------------

REINFORCE_RESET = """
    import torch
    from torch import nn
    from torch.distributions import Categorical
    class Agent:
        def __init__(self, policy, batch):
            self.policy = policy
            self.batch = batch
            self.optimizer = torch.optim.Adam(policy.parameters())
            self.saved_log_probs = [] if batch else {{k: [] for k in range(4)}}
        def select_action(self, state):
            m = Categorical(self.policy(state))
            action = m.sample()
            self.saved_log_probs.append(m.log_prob(action))
            return action.item()
        def finish_episode(self):
            loss = -torch.stack(self.saved_log_probs).sum()
            loss.backward()
            self.optimizer.step()
            self.saved_log_probs = {reset}
"""


@pytest.mark.parametrize("reset, kept", [
    ("[] if self.batch else {k: [] for k in range(4)}", False),  # pytorch/examples' batched REINFORCE
    ("{k: [] for k in range(4)}", False),
    ("[p for p in self.saved_log_probs if p is not None]", True),  # keeps the old items
    ("[] if self.batch else self.saved_log_probs", True),  # one branch keeps the old list
])
def test_a_reset_made_by_a_choice_or_a_comprehension_of_new_containers_empties_the_buffer(reset, kept):
    source = REINFORCE_RESET.format(reset=reset)
    lines = textwrap.dedent(source).splitlines()
    at = next(n for n, text in enumerate(lines, 1) if "saved_log_probs.append" in text)
    assert codes(source) == ([(at, "GL103")] if kept else [])


# ----- torch.is_tensor(x) narrows as isinstance(x, torch.Tensor) does ----------------------------

IS_TENSOR = """
    import torch
    class Loss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, w, interval):
            if {test}:
                ctx.save_for_backward(w, interval)
                ctx.interval = {in_body}
            else:
                ctx.save_for_backward(w)
                ctx.interval = {in_orelse}
            return (w * interval).sum()
        @staticmethod
        def backward(ctx, g):
            return g, None
"""


@pytest.mark.parametrize("test, in_body, in_orelse, flagged", [
    ("torch.is_tensor(interval)", "None", "interval", False),  # torch-ngp's loss.py: a number in the else branch
    ("not torch.is_tensor(interval)", "interval", "None", False),
    ("torch.is_tensor(interval)", "interval", "None", True),  # a tensor in the body
])
def test_torch_is_tensor_narrows_a_value_in_each_branch(test, in_body, in_orelse, flagged):
    source = IS_TENSOR.format(test=test, in_body=in_body, in_orelse=in_orelse)
    lines = textwrap.dedent(source).splitlines()
    at = next(n for n, text in enumerate(lines, 1) if "= interval" in text and "ctx.interval" in text)
    assert codes(source) == ([(at, "GL101")] if flagged else [])


# ----- a backward torch never calls: every output non-differentiable -----------------------------

NEVER_CALLED = """
    import torch
    class Sample(torch.autograd.Function):
        @staticmethod
        def forward(ctx, xyz, npoint):
            {body}
        @staticmethod
        def backward(ctx, grad_out, *rest):
            return ()
"""


@pytest.mark.parametrize("body, flagged", [
    # Pointnet2's furthest-point sampling, three_nn and ball_query (measured: no grad_fn, never called)
    ("out = xyz[:npoint] * 2\n            ctx.mark_non_differentiable(out)\n            return out", False),
    ("dist = xyz.norm(dim=-1)\n            idx = xyz.argmin(dim=-1)\n"
     "            ctx.mark_non_differentiable(dist, idx)\n            return dist, idx", False),
    ("return torch.argsort(xyz, dim=-1)", False),  # an integer output: never differentiable
    ("out = xyz * 2\n            return out", True),
    ("dist = xyz.norm(dim=-1)\n            ctx.mark_non_differentiable(dist)\n            return dist, xyz * 2", True),
])
def test_no_count_is_reported_for_a_backward_torch_never_calls(body, flagged):
    source = NEVER_CALLED.format(body=body)
    found = [c for c in codes(source) if c[1] == "GL201"]
    assert bool(found) == flagged



# ----- a carried state detached in place: `state.detach_()`, `hidden[0].detach_()` --------------

DETACHED_IN_PLACE = """
    import torch
    from torch import nn
    def train(loader, opt):
        model = nn.LSTM(4, 4)
        hidden = (torch.zeros(1, 1, 4), torch.zeros(1, 1, 4))
        ema = torch.zeros(1, 4)
        for x in loader:
            {before}
            out, hidden = model(x, hidden)
            ema = ema * 0.9 + out[0]
            {after}
            out.sum().backward()
            opt.step()
"""


@pytest.mark.parametrize("before, after, flagged", [
    ("pass", "pass", {"hidden", "ema"}),
    # pytorch/examples' distributed RNN; measured on torch 2.13: no chain across steps
    ("hidden[0].detach_(); hidden[1].detach_(); ema.detach_()", "pass", set()),
    ("pass", "hidden[0].detach_(); hidden[1].detach_(); ema.detach_()", set()),  # last in the step
    ("ema.detach_()", "pass", {"hidden"}),  # hidden is carried with its graph
    ("x.detach_()", "pass", {"hidden", "ema"}),  # another tensor detached: both still chain
])
def test_a_carried_state_detached_in_place_chains_no_step(before, after, flagged):
    source = DETACHED_IN_PLACE.format(before=before, after=after)
    lines = textwrap.dedent(source).splitlines()
    found = {lines[line - 1].split("=")[0].strip().split(",")[-1].strip() for line, code in codes(source) if code == "GL104"}
    assert found == flagged
