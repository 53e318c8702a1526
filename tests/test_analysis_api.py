"""Rules ask the analysis named questions (gradlint/analysis.py) and never walk syntax themselves.

What "walks syntax" means here, checked on each rules/*.py with CPython's `ast` (a rule's
`precheck` too: it asks gradlint/prechecks.py's questions):
- it names a syntax node type (`cst.Call`, `ast.For`, ...) outside a type annotation: an
  isinstance test on nodes is a walk in disguise;
- it calls a walker: `child_nodes`, `descendants`, `blocks_of`, `returns_in`, `target_names`,
  `assigned_paths`, `visit`, `walk`, `children`;
- it defines a visitor: a class derived from a `*Visitor`, a `*Transformer`, `Walker` or `Prescan`;
- it loops (a `for` or a comprehension) over a node's children: `.body`, `.orelse`, `.args`,
  `.params`, `.elements`, `.targets`, ... of anything (read as attributes: `d.items()` and
  `d.values()` are method calls, not children);
- it defines a function that calls itself (recursion over nodes);
- it imports from gradlint anything but the questions (`gradlint.analysis`), the rule and finding
  types (`gradlint.rule`, `gradlint.findings`) and `gradlint.prechecks` or `gradlint.graph_store_precheck`
  (GL103/GL104's gate) for its precheck.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import libcst as cst
import pytest

import gradlint.analysis as analysis

RULES_DIR = Path(__file__).resolve().parent.parent / "rules"
GRADLINT_DIR = Path(__file__).resolve().parent.parent / "gradlint"

# Rules not yet switched to the questions, by file stem; the lead empties this list. A rule that
# no longer walks syntax fails test_pending_rules_still_walk_syntax until it is taken off.
PENDING: frozenset[str] = frozenset()

_WALKER_CALLS = frozenset({"child_nodes", "descendants", "blocks_of", "returns_in", "target_names",
                           "assigned_paths", "visit", "walk", "children"})
_CHILD_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "args", "params", "posonly_params",
                           "kwonly_params", "elements", "targets", "items", "cases", "decorators", "bases",
                           "keywords", "slice", "names", "values", "comparisons", "for_in"})
_VISITOR_BASES = ("Visitor", "Transformer")
_ALLOWED_GRADLINT_IMPORTS = frozenset({"gradlint.analysis", "gradlint.rule", "gradlint.findings",
                                       "gradlint.prechecks", "gradlint.graph_store_precheck"})


def _last_name(expr: ast.expr) -> str:
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return expr.id if isinstance(expr, ast.Name) else ""


def _annotations(tree: ast.Module) -> set[int]:
    """ids of every node inside a type annotation."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        roots = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        for root in roots:
            inside.update(id(n) for n in ast.walk(root))
    return inside


def syntax_walking(source: str) -> list[str]:
    """What in a rule's source walks syntax, one line per finding (see the module doc)."""
    tree = ast.parse(source)
    skipped = _annotations(tree)  # prechecks too ask named questions (gradlint/prechecks.py)
    syntax_modules = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("libcst", "ast"):
                    syntax_modules.add(alias.asname or alias.name)
                elif alias.name.startswith("gradlint"):
                    found.append(f"line {node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == "libcst" or node.module.startswith("libcst."):
                found.append(f"line {node.lineno}: imports node types from {node.module}")
            elif node.module == "gradlint":
                found += [f"line {node.lineno}: imports gradlint.{a.name}" for a in node.names
                          if f"gradlint.{a.name}" not in _ALLOWED_GRADLINT_IMPORTS]
            elif node.module.startswith("gradlint") and node.module not in _ALLOWED_GRADLINT_IMPORTS:
                found.append(f"line {node.lineno}: imports from {node.module}")
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in syntax_modules \
                and node.attr[:1].isupper():
            found.append(f"line {node.lineno}: names the node type {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call) and _last_name(node.func) in _WALKER_CALLS:
            found.append(f"line {node.lineno}: calls {_last_name(node.func)}")
        elif isinstance(node, ast.ClassDef) and any(
                _last_name(b).endswith(_VISITOR_BASES) or _last_name(b) in ("Walker", "Prescan") for b in node.bases):
            found.append(f"line {node.lineno}: defines the visitor {node.name}")
        elif isinstance(node, (ast.For, ast.comprehension)):
            # `.items()` of a dict is a method call; `.items` of a With statement is its children.
            called = {id(n.func) for n in ast.walk(node.iter) if isinstance(n, ast.Call)}
            iterated = [n for n in ast.walk(node.iter) if isinstance(n, ast.Attribute) and n.attr in _CHILD_FIELDS
                        and id(n) not in called]
            found += [f"line {n.lineno}: loops over .{n.attr}" for n in iterated]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(inner, ast.Call) and _last_name(inner.func) == node.name
                and (isinstance(inner.func, ast.Name) or _last_name(getattr(inner.func, "value", None)) == "self")
                for inner in ast.walk(node)):
            found.append(f"line {node.lineno}: {node.name} calls itself")
    return sorted(set(found), key=lambda line: (int(line.split(":")[0].split()[1]), line))


RULE_FILES = sorted(p for p in RULES_DIR.glob("gl*.py"))


@pytest.mark.parametrize("path", [p for p in RULE_FILES if p.stem not in PENDING], ids=lambda p: p.stem)
def test_rule_asks_the_analysis_and_walks_no_syntax(path):
    assert syntax_walking(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", [p for p in RULE_FILES if p.stem in PENDING], ids=lambda p: p.stem)
def test_pending_rules_still_walk_syntax(path):
    """Keeps PENDING honest: a rule switched to the questions must come off it."""
    assert syntax_walking(path.read_text(encoding="utf-8")), f"{path.stem} walks no syntax: take it off PENDING"


def test_pending_names_only_rules_that_exist():
    assert PENDING <= {p.stem for p in RULE_FILES}


def test_the_check_catches_each_kind_of_private_walker():
    """The criterion can fail: a rule written the old way is caught on every count."""
    old_style = textwrap.dedent('''
        import libcst as cst
        from gradlint.prescan import child_nodes
        from gradlint.rule import Hit, Rule

        class _Scan(cst.CSTVisitor):
            pass

        def _returns(node):
            if isinstance(node, cst.Return):
                yield node
            for child in child_nodes(node):
                yield from _returns(child)

        class Old(Rule):
            def precheck(self, tree):
                import ast
                return any(isinstance(n, ast.Call) for n in ast.walk(tree))

            def check(self, model) -> "cst.Call":
                for statement in model.module.body:
                    yield Hit(statement, "")
                for name, value in {"a": 1}.items():
                    pass
    ''')
    assert syntax_walking(old_style) == [
        "line 3: imports from gradlint.prescan",
        "line 6: defines the visitor _Scan",
        "line 6: names the node type cst.CSTVisitor",
        "line 9: _returns calls itself",
        "line 10: names the node type cst.Return",
        "line 12: calls child_nodes",
        "line 18: calls walk",
        "line 18: names the node type ast.Call",
        "line 21: loops over .body",
    ]


def test_the_facade_documents_every_question_it_exports():
    doc = analysis.__doc__
    for name in analysis.__all__:
        assert hasattr(analysis, name), name
        if inspect.isfunction(getattr(analysis, name)):
            assert f"{name}(" in doc, f"{name} is exported but not listed in gradlint/analysis.py's doc"


def test_only_rules_import_the_facade():
    """analysis.py sits on top: an analysis module importing it back would be a cycle."""
    importers = [p.name for p in GRADLINT_DIR.glob("*.py") if p.name != "analysis.py" and any(
        isinstance(n, ast.ImportFrom) and n.module == "gradlint.analysis"
        or isinstance(n, ast.ImportFrom) and n.module == "gradlint" and any(a.name == "analysis" for a in n.names)
        or isinstance(n, ast.Import) and any(a.name == "gradlint.analysis" for a in n.names)
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))))]
    assert importers == []


# ----- the questions, on realistic code ---------------------------------------------------------

def _model(source: str) -> analysis.FileModel:
    return analysis.FileModel(cst.parse_module(textwrap.dedent(source)))


def _code(model: analysis.FileModel, node: cst.CSTNode) -> str:
    return model.module.code_for_node(node).strip()


GATED_RELU = """
    import torch
    import torch.nn.functional as F
    class GatedRelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x: torch.Tensor, gate, bias, steps, index):
            h = x[:, :3]
            h[gate < 0] = 0
            bias += 1
            steps += 1
            F.relu(gate, inplace=True)
            index.clamp_(min=0)
            ctx.mark_dirty(gate)
            return x * gate + bias.unsqueeze(0)
        @staticmethod
        def backward(ctx, g):
            return g, g, g, None, None
"""


def test_inplace_input_writes_name_the_input_the_alias_and_the_evidence():
    model = _model(GATED_RELU)
    [(function, forward)] = list(analysis.methods_of_functions(model, "forward"))
    found = analysis.inplace_input_writes(model, function, forward)
    assert [(_code(model, w.node), w.input, w.via, w.evidence, w.on_a_tensor) for w in found.writes] == [
        ("h[gate < 0] = 0", "x", "h", "store", True),
        ("bias += 1", "bias", "bias", "augmented", True),  # `bias.unsqueeze(0)`: used as a tensor
        ("steps += 1", "steps", "steps", "augmented", False),  # could be an int, rebound
        ("F.relu(gate, inplace=True)", "gate", "gate", "call", True),
        ("index.clamp_(min=0)", "index", "index", "call", True),
    ]
    assert found.may_be_marked_dirty == {"gate"} and found.marked_in == "forward"
    assert analysis.inputs_without_gradient(function) == {"steps", "index"}


def test_inplace_input_writes_read_mark_dirty_in_setup_context_and_through_helpers():
    setup_style = """
        import torch
        class Stash(torch.autograd.Function):
            @staticmethod
            def forward(x, buf):
                buf.copy_(x)
                x.add_(1)
                return x
            @staticmethod
            def setup_context(ctx, inputs, output):
                x, buf = inputs
                ctx.mark_dirty(x)
    """
    model = _model(setup_style)
    [(function, forward)] = list(analysis.methods_of_functions(model, "forward"))
    found = analysis.inplace_input_writes(model, function, forward)
    assert [w.input for w in found.writes] == ["buf", "x"]
    assert found.may_be_marked_dirty == {"x"} and found.marked_in == "setup_context"
    # ctx handed to a helper that may call mark_dirty: any input may be marked.
    helper = _model(textwrap.dedent(GATED_RELU).replace("ctx.mark_dirty(gate)", "_mark(ctx, gate)")
                    + "def _mark(ctx, t):\n    ctx.mark_dirty(t)\n")
    [(function, forward)] = list(analysis.methods_of_functions(helper, "forward"))
    assert analysis.inplace_input_writes(helper, function, forward).may_be_marked_dirty == {
        "x", "gate", "bias", "steps", "index"}


def test_pack_hooks_give_the_returns_of_the_argument_outside_leaf_branches():
    model = _model("""
        import torch
        from torch.autograd.graph import saved_tensors_hooks
        class Offload(saved_tensors_hooks):
            def __init__(self):
                self.stash = {}
                super().__init__(self.pack, self.unpack)
            def pack(self, t):
                if t.grad_fn is None:
                    return t
                if t.numel() < 1024:
                    return t, t.device
                key = len(self.stash)
                self.stash[key] = t.to("cpu")
                return key
            def unpack(self, key):
                return key
        def run(model, x):
            with saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
                return model(x)
    """)
    hooks = analysis.pack_hooks(model)
    assert [(h.name, [_code(model, r) for r in h.returns_its_argument]) for h in hooks] == [
        ("Offload.pack", ["return t, t.device"]),
        ("", []),
    ]


def test_nondeterministic_sums_in_backward_by_kind():
    model = _model("""
        import torch
        from gradlint.cuda_ext import scatter_add
        from .ext import segment_sum_atomic
        class Scatter(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, index):
                ctx.save_for_backward(index)
                return x.new_zeros(8, x.size(1)).index_add_(0, index, x)
            @staticmethod
            def backward(ctx, g):
                (index,) = ctx.saved_tensors
                a = torch.zeros_like(g).index_add_(0, index, g)
                b = torch.index_put(g, (index,), g, accumulate=True)
                c = scatter_add(g, index, 8)
                d = scatter_add(g, index, 8, deterministic=True)
                e = segment_sum_atomic(g, index)
                counts = torch.zeros(8, dtype=torch.long).index_add_(0, index, torch.ones_like(index))
                hits = torch.zeros(8).index_add_(0, index, (g > 0).float())
                return a + b + c + d + e, None
    """)
    [(function, backward)] = list(analysis.methods_of_functions(model, "backward"))
    found = analysis.nondeterministic_sums_in_backward(model, function, backward)
    assert [(f.kind, f.shown) for f in found] == [
        (analysis.ATOMIC_ADD, "Tensor.index_add_"),
        (analysis.THREADED_ACCUMULATE, "torch.index_put"),
        (analysis.CUDA_EXT_ATOMIC, "gradlint.cuda_ext.scatter_add"),
        (analysis.NAMED_ATOMIC_KERNEL, "segment_sum_atomic"),
    ]
    assert analysis.atomic_kernel_launches_from_backward(model) == []


def test_tensor_data_uses_tell_copies_and_metadata_from_aliases():
    model = _model("""
        import torch
        class Clip(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w, batch):
                rows = w.data.shape[0]
                copy = w.data.clone()
                graphs = batch.data.num_graphs
                w.data.clamp_(-1.0, 1.0)
                ctx.save_for_backward(x, w)
                return x @ w
            @staticmethod
            def backward(ctx, g):
                x, w = ctx.saved_tensors
                g.data = g.data * 0.5
                return g @ w.t(), x.t() @ g, None
    """)
    uses = analysis.tensor_data_uses(model)
    assert [(u.method, u.access, u.shown, u.copy_or_metadata, _code(model, u.statement)) for u in uses] == [
        ("forward", "read", "w.data", True, "rows = w.data.shape[0]"),
        ("forward", "read", "w.data", True, "copy = w.data.clone()"),
        ("forward", "read", "w.data", False, "w.data.clamp_(-1.0, 1.0)"),
        ("backward", "assigned", "g.data", False, "g.data = g.data * 0.5"),
        ("backward", "read", "g.data", False, "g.data = g.data * 0.5"),
    ]
    assert {u.function for u in uses} == {"Clip"}


def test_what_a_function_saves_and_keeps_on_ctx():
    model = _model("""
        import torch
        class Pick(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, weight):
                order = x.argsort(dim=0)
                out = x.exp()
                ctx.save_for_backward(x)
                if weight is not None:
                    ctx.save_for_backward(x, weight)
                else:
                    ctx.save_for_backward(x)
                ctx.order = order
                ctx.save_for_backward(order, out[:, :2])
                ctx.out = out
                return out
            @staticmethod
            def backward(ctx, g):
                x, order, half = ctx.saved_tensors
                return g * ctx.out, None
    """)
    # Both branches of the `if` repeat the first save; the last call repeats them all.
    assert [_code(model, s.node) for s in analysis.repeated_saves(model)] == [
        "ctx.save_for_backward(x, weight)", "ctx.save_for_backward(x)", "ctx.save_for_backward(order, out[:, :2])"]
    assert [(_code(model, s.node), s.ctx_attribute, s.shown) for s in analysis.int64_index_saves(model)] == [
        ("ctx.order", "order", "ctx.order"), ("ctx.save_for_backward(order, out[:, :2])", None, "")]
    assert [(s.function, s.argument) for s in analysis.saved_output_views(model)] == [("Pick", "out[:, :2]")]
    stores = analysis.tensors_kept_on_ctx(model)
    assert [(_code(model, s.node), s.kind, s.several_outputs, s.save_call) for s in stores] == [
        ("ctx.order", analysis.TENSOR, False, "ctx.save_for_backward(order)"),
        ("ctx.out", analysis.OUTPUT, False, "ctx.save_for_backward(out)"),
    ]
    # Four save_for_backward calls already: no single call to join, so no rewrite is offered.
    assert [s.save_instead for s in stores] == [None, None]


def test_tensors_kept_on_ctx_come_with_the_save_for_backward_rewrite():
    model = _model("""
        import torch
        class Exp(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                out = x.exp()
                ctx.out = out
                return out
            @staticmethod
            def backward(ctx, grad):
                return grad * ctx.out
    """)
    [store] = analysis.tensors_kept_on_ctx(model)
    assert (store.function, store.ctx, store.attribute, store.kind) == ("Exp", "ctx", "out", analysis.OUTPUT)
    assert [(type(c).__name__, _code(model, c.node), c.text) for c in store.save_instead] == [
        ("Replace", "ctx.out", "out"),
        ("Replace", "ctx.out = out", "ctx.save_for_backward(out)"),
        ("InsertLineAbove", "return grad * ctx.out", "out, = ctx.saved_tensors"),
    ]


def test_calls_of_a_training_step():
    model = _model("""
        import torch
        class Trainer:
            def fit(self, loader, opt):
                for step, (x, y) in enumerate(loader):
                    out, self.h = self.rnn(x, self.h)
                    loss = (out - y).pow(2).mean()
                    loss.backward(retain_graph=True)
                    opt.step()
                    torch.cuda.empty_cache()
                    if step % 100 == 0:
                        torch.cuda.empty_cache()
        def warm(model, x):
            torch.cuda.empty_cache()
            return model(x)
    """)
    # `warm` steps no optimizer and runs no training loop: its call is not in a step.
    assert [s.periodic for s in analysis.training_step_calls(model, "torch.cuda.empty_cache")] == [False, True]
    assert [(_code(model, b.node), b.carried_state) for b in analysis.retained_last_backwards(model)] == [
        ("loss.backward(retain_graph=True)", "Trainer.h")]


def test_how_functions_are_declared_and_called():
    model = _model("""
        import torch
        class Double(torch.autograd.Function):
            def forward(ctx, x):
                return x * 2
            @staticmethod
            def backward(ctx, g):
                return g * 2
        class Stateful(torch.autograd.Function):
            def __init__(self):
                self.k = 2
            @once_differentiable
            def forward(ctx, x):
                return x
        def run(x):
            a = Double.forward(None, x)
            b = Double.forward(ctx=None, x=x)
            c = Double()(x)
            d = Double()
            return a + b + c
    """)
    assert [(m.function, m.method, _code(model, m.insert_above).splitlines()[0], m.safe_to_add)
            for m in analysis.methods_missing_staticmethod(model)] == [
        ("Double", "forward", "def forward(ctx, x):", True),
        ("Stateful", "forward", "@once_differentiable", False),
    ]
    assert [(c.function, c.apply_instead) for c in analysis.direct_forward_calls(model)] == [
        ("Double", "Double.apply(x)"), ("Double", None)]
    assert [(_code(model, i.node), i.called) for i in analysis.function_instantiations(model)] == [
        ("Double()", True), ("Double()", False)]


def test_containers_passed_to_apply_hold_tensors_not_indices():
    model = _model("""
        import torch
        class Cat(torch.autograd.Function):
            @staticmethod
            def forward(ctx, xs):
                return torch.cat(xs)
            @staticmethod
            def backward(ctx, g):
                return None
        def run(a, b, idx, mask):
            pair = [a, b]
            y = Cat.apply(pair)
            z = Cat.apply((idx, mask))
            return Cat.apply((a, b)) + y + z
    """)
    assert [_code(model, c.node) for c in analysis.containers_passed_to_apply(model)] == [
        "Cat.apply(pair)", "Cat.apply((a, b))"]


def test_what_backward_returns_against_what_torch_expects():
    model = _model("""
        import torch
        class Affine(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w, b, scale=1.0):
                ctx.save_for_backward(x, w)
                return x @ w + b
            @staticmethod
            def backward(ctx, g):
                x, w = ctx.saved_tensors
                if g.dtype == torch.float16:
                    return g @ w.t(), x.t() @ g
                return g @ w.t(), x.t() @ g, g.sum(0), None
        def run(x, w, b):
            return Affine.apply(x, w, b)
    """)
    [counts] = analysis.backward_return_counts(model)
    assert (counts.function.name, counts.inputs, counts.needed) == ("Affine", 4, 3)
    assert [(r.nones, r.falls_off) for r in counts.returns] == [
        ((False, False), False), ((False, False, False, True), False)]
    [unchecked] = analysis.unchecked_backwards(model)
    assert (unchecked.function, unchecked.computed) == ("Affine", 3)


def test_graphs_a_module_forward_keeps():
    model = _model("""
        import torch
        import torch.nn as nn
        LAST = None
        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 4)
                self.history = []
            def forward(self, x):
                global LAST
                h = self.lin(x)
                self.h = h
                self.total = self.total + h.sum()
                self.history.append(h)
                LAST = h
                with torch.no_grad():
                    self.mean = h.mean()
                return h
    """)
    assert [(k.where, k.shown, k.holder, k.chained) for k in analysis.graph_kept_by_module_forward(model)] == [
        (analysis.SELF_ATTRIBUTE, "self.h", "Encoder.h", False),
        (analysis.SELF_ATTRIBUTE, "self.total", "Encoder.total", True),
        (analysis.SELF_CONTAINER, "self.history", "Encoder.history", True),
        (analysis.GLOBAL, "LAST", "LAST", False),
    ]


def test_one_fixed_slot_of_a_module_container_keeps_one_step():
    """A fixed key of a list or dict is replaced every forward (DGL's `self.g.ndata["z"] = z`):
    one step's graph, as an attribute keeps it, unless the new value reads the slot. Appends keep
    every step's, and so may a fixed index of what may be a tensor (written in place, it chains)."""
    model = _model("""
        import torch.nn as nn
        class GAT(nn.Module):
            def __init__(self, g):
                super().__init__()
                self.g = g
                self.fc = nn.Linear(4, 4)
                self.buf = [None]
                self.stats = {"z": 0}
                self.history = []
            def forward(self, h):
                z = self.fc(h)
                self.g.ndata["z"] = z
                self.buf[0] = z
                self.stats["z"] = self.stats["z"] + z
                self.history.append(z)
                return z
        class Prototypes(nn.Module):
            def __init__(self, protos):
                super().__init__()
                self.fc = nn.Linear(4, 4)
                self.protos = protos  # maybe a tensor: `[0] =` then writes it in place
            def forward(self, h):
                z = self.fc(h)
                self.protos[0] = z.mean(0)
                return z
    """)
    assert [(k.where, k.shown, k.chained) for k in analysis.graph_kept_by_module_forward(model)] == [
        (analysis.SELF_ATTRIBUTE, "self.g.ndata", False),
        (analysis.SELF_ATTRIBUTE, "self.buf", False),
        (analysis.SELF_ATTRIBUTE, "self.stats", True),
        (analysis.SELF_CONTAINER, "self.history", True),
        (analysis.SELF_CONTAINER, "self.protos", True),
    ]


def test_graphs_a_training_loop_keeps_past_the_step():
    model = _model("""
        import torch
        def train(model, loader, opt):
            losses = []
            total = 0.0
            window = 0.0
            for i, (x, y) in enumerate(loader):
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss)
                total += loss
                window = window + loss
                if i % 10 == 0:
                    window = 0.0
            return sum(l.item() for l in losses)
    """)
    [kept] = analysis.graph_kept_in_containers(model)
    assert (_code(model, kept.node), kept.holder, kept.method, kept.through, kept.overwrites) == (
        "losses.append(loss)", "losses", "append", None, False)
    assert (_code(model, kept.keep_instead.node), kept.keep_instead.text) == ("loss", "loss.detach()")
    assert [(t.name, None if t.reset is None else _code(model, t.reset), t.add_instead.text)
            for t in analysis.graph_chained_totals(model)] == [
        ("total", None, "loss.item()"), ("window", "window = 0.0", "loss.item()")]
