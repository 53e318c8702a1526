"""Unsafe fixes may change behaviour the way the user asked for; they must never break the code or
stop it training (issue 16, "Fixes that break code").

Each case is a small training script. Where the kept value is not proven a tensor (a module's
output may be a tuple or a dict), where a backward later runs through what is kept (REINFORCE's
`torch.stack(log_probs).sum().backward()`, a memory bank, a total that is the loss), where the store
is in a Module's forward, or where what is kept leaves what the file shows, the finding stays and
no fix is offered. Where a fix is offered, its result is checked here: every case is fixed with
`--unsafe-fixes` and run with torch, and it must still run and train (gradients reach the
parameters the original trained).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from gradlint.engine import RuleSet, fix_source, lint_source
from gradlint.registry import all_rules

ALL = RuleSet(all_rules(), {})


@dataclass(frozen=True)
class Case:
    source: str
    # (rule, text on the flagged line): each must be reported there, and without a fix when
    # `fixed` is None; with `fixed`, `--fix --unsafe-fixes` must give exactly that source.
    flagged: tuple[tuple[str, str], ...]
    fixed: str | None = None


def _case(source: str, *flagged: tuple[str, str], fixed: str | None = None) -> Case:
    return Case(textwrap.dedent(source), flagged, textwrap.dedent(fixed) if fixed is not None else None)


CASES = {
    # A module that returns a tuple: `.detach()` on it raises AttributeError.
    "tuple_output": _case("""
        import torch
        from torch import nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(4, 4)
                self.head = nn.Linear(4, 1)

            def forward(self, x):
                h = torch.relu(self.body(x))
                return self.head(h), h


        def train(model, loader, optimizer):
            outputs = []
            for x, y in loader:
                out = model(x)
                loss = (out[0] - y).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                outputs.append(out)
            print(len(outputs))


        torch.manual_seed(0)
        net = Net()
        train(net, [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)], torch.optim.SGD(net.parameters(), lr=0.1))
        assert net.body.weight.grad is not None
        """, ("GL103", "outputs.append(out)")),
    # A model returning a dict of a loss, a bool and a float: `.item()` on a float or a bool, or
    # `.detach()` on one, raises.
    "dict_output": _case("""
        import torch
        from torch import nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 1)

            def forward(self, x, y):
                loss = (self.lin(x) - y).pow(2).mean()
                return {"loss": loss, "converged": bool(loss < 1e-3), "lr_scale": 0.5}


        def train(model, loader, optimizer):
            total_loss = 0.0
            done_steps = 0
            scale_sum = 0.0
            for x, y in loader:
                stats = model(x, y)
                optimizer.zero_grad()
                stats["loss"].backward()
                optimizer.step()
                total_loss += stats["loss"]
                done_steps += stats["converged"]
                scale_sum += stats["lr_scale"]
            print(float(total_loss), done_steps, scale_sum)


        torch.manual_seed(0)
        net = Net()
        train(net, [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)], torch.optim.SGD(net.parameters(), lr=0.1))
        """, ("GL104", "total_loss += stats"), ("GL104", "done_steps += stats"), ("GL104", "scale_sum += stats")),
    # Module.forward keeps a tensor on a graph object its caller trains through (a GNN's edge
    # data): `.detach()` there silently stops `aux` learning. The graph is forward's input, the
    # step's own data (made afresh in the loop here): no longer reported at all
    # (lifetimes.forward_input), and no fix may reach it.
    "module_forward": _case("""
        import torch
        from torch import nn


        class Graph:
            def __init__(self):
                self.edata = {}


        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 4)
                self.aux = nn.Linear(4, 4)

            def forward(self, x, graph):
                h = torch.relu(self.lin(x))
                graph.edata["h"] = torch.tanh(self.aux(h))
                return h


        def train(model, loader, optimizer):
            for x, y in loader:
                graph = Graph()
                out = model(x, graph)
                loss = (out - y).pow(2).mean() + graph.edata["h"].pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


        torch.manual_seed(0)
        enc = Encoder()
        train(enc, [(torch.randn(8, 4), torch.randn(8, 4)) for _ in range(3)], torch.optim.SGD(enc.parameters(), lr=0.1))
        assert enc.aux.weight.grad is not None and enc.aux.weight.grad.abs().sum() > 0, "aux no longer trains"
        """),
    # REINFORCE: the episode's log-probs are what a helper's backward runs through (then it
    # empties them); `.detach()` makes that backward raise.
    "reinforce_helper": _case("""
        import torch
        from torch import nn
        from torch.distributions import Categorical


        class Policy(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 2)

            def forward(self, x):
                return torch.softmax(self.lin(x), -1)


        def finish_episode(optimizer, log_probs, rewards):
            returns = torch.tensor(rewards)
            loss = -(torch.stack(log_probs) * returns).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            del log_probs[:]


        def train(policy, optimizer, episodes):
            log_probs, rewards = [], []
            for episode in range(episodes):
                state = torch.randn(4)
                for t in range(5):
                    m = Categorical(policy(state))
                    action = m.sample()
                    log_probs.append(m.log_prob(action))
                    rewards.append(float(action) + 1.0)
                    state = torch.randn(4)
                finish_episode(optimizer, log_probs, rewards)
                del rewards[:]


        torch.manual_seed(0)
        policy = Policy()
        train(policy, torch.optim.SGD(policy.parameters(), lr=0.01), 3)
        assert policy.lin.weight.grad is not None
        """, ("GL103", "log_probs.append(m.log_prob(action))")),
    # The same with the loss made in the loop from the list: `torch.stack(saved).sum().backward()`.
    "reinforce_inline": _case("""
        import torch
        from torch import nn
        from torch.distributions import Categorical


        def train(policy, optimizer, episodes):
            saved = []
            for episode in range(episodes):
                state = torch.randn(4)
                for t in range(5):
                    m = Categorical(logits=policy(state))
                    action = m.sample()
                    saved.append(m.log_prob(action))
                    state = torch.randn(4)
                loss = -torch.stack(saved[-5:]).sum()
                optimizer.zero_grad()
                loss.backward(retain_graph=True)
                optimizer.step()


        torch.manual_seed(0)
        policy = nn.Linear(4, 2)
        train(policy, torch.optim.SGD(policy.parameters(), lr=0.01), 3)
        assert policy.weight.grad is not None
        """, ("GL103", "saved.append(m.log_prob(action))")),
    # An agent of another file (here, of this one, called on a parameter) runs the backward:
    # `agent.update(log_probs)` may be REINFORCE's update, whatever its name.
    "passed_on": _case("""
        import torch
        from torch import nn
        from torch.distributions import Categorical


        class Agent:
            def __init__(self, policy):
                self.policy = policy
                self.optimizer = torch.optim.SGD(policy.parameters(), lr=0.01)

            def update(self, log_probs):
                self.optimizer.zero_grad()
                (-torch.stack(log_probs).sum()).backward()
                self.optimizer.step()


        def train(agent, episodes):
            log_probs = []
            for episode in range(episodes):
                state = torch.randn(4)
                for t in range(5):
                    m = Categorical(logits=agent.policy(state))
                    action = m.sample()
                    log_probs.append(m.log_prob(action))
                    state = torch.randn(4)
                agent.update(log_probs)
                log_probs.clear()


        torch.manual_seed(0)
        agent = Agent(nn.Linear(4, 2))
        train(agent, 3)
        assert agent.policy.weight.grad is not None
        """, ("GL103", "log_probs.append(m.log_prob(action))")),
    # A memory bank the step's own loss reads (before it is appended to, a step later).
    "memory_bank": _case("""
        import torch
        from torch import nn


        def train(model, loader, optimizer):
            memory = []
            for x in loader:
                emb = model(x).tanh()
                loss = emb.pow(2).mean()
                if memory:
                    loss = loss + (emb @ torch.cat(memory).t()).mean()
                optimizer.zero_grad()
                loss.backward(retain_graph=True)
                optimizer.step()
                memory.append(emb)


        torch.manual_seed(0)
        net = nn.Linear(4, 4)
        train(net, [torch.randn(8, 4) for _ in range(3)], torch.optim.SGD(net.parameters(), lr=0.01))
        """, ("GL103", "memory.append(emb)")),
    # The total is the loss a method of another file's base class runs backward on (a strategy
    # mixin: `self.backward()` does `self.loss.backward()`); `.item()` would stop training. Its
    # reset comes after the update, which the `break` may skip: reported, never fixed. (Made
    # before the update, as avalanche does, it is made afresh every step: no finding at all,
    # GL104's valid examples.)
    "total_is_the_loss": _case("""
        import torch
        from torch import nn


        class Base:
            def backward(self):
                self.loss.backward()


        class SGDUpdate:
            def training_epoch(self, loader):
                self.loss = torch.zeros(())
                for x, y in loader:
                    self.optimizer.zero_grad()
                    self.mb_output = self.model(x)
                    self.loss += nn.functional.mse_loss(self.mb_output, y)
                    if x is None:
                        break
                    self.backward()
                    self.optimizer.step()
                    self.loss = torch.zeros(())


        class Strategy(SGDUpdate, Base):
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


        torch.manual_seed(0)
        strategy = Strategy(nn.Linear(4, 1))
        strategy.training_epoch([(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)])
        assert strategy.model.weight.grad is not None
        """, ("GL104", "self.loss += nn.functional.mse_loss")),
    # A history handed back to the caller: whether the caller differentiates it the file does not
    # show (a helper summing micro-batch losses for the caller's backward looks the same).
    "returned": _case("""
        import torch
        import torch.nn.functional as F


        def accumulate(model, batches):
            total = 0
            for x, y in batches:
                total += F.mse_loss(model(x), y)
            return total


        def train(model, loader, optimizer):
            for batches in loader:
                loss = accumulate(model, batches)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


        torch.manual_seed(0)
        net = torch.nn.Linear(4, 1)
        data = [[(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(2)] for _ in range(2)]
        train(net, data, torch.optim.SGD(net.parameters(), lr=0.1))
        assert net.weight.grad is not None
        """, ("GL104", "total += F.mse_loss")),
    # Losses of a dict-returning model (neuromancer's `output[metric]`), stacked afterwards:
    # `.item()` would make `torch.stack` raise, and the item is not proven a tensor.
    "dict_losses_stacked": _case("""
        import torch
        from torch import nn


        class Problem(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 1)

            def forward(self, batch):
                return {"train_loss": self.lin(batch).pow(2).mean()}


        def fit(problem, loader, optimizer, epochs):
            for epoch in range(epochs):
                losses = []
                for batch in loader:
                    output = problem(batch)
                    optimizer.zero_grad()
                    output["train_loss"].backward()
                    optimizer.step()
                    losses.append(output["train_loss"])
                print(torch.mean(torch.stack(losses)))


        torch.manual_seed(0)
        p = Problem()
        fit(p, [torch.randn(8, 4) for _ in range(3)], torch.optim.SGD(p.parameters(), lr=0.1), 2)
        """, ("GL103", 'losses.append(output["train_loss"])')),
    # A parameter appended to a list is a leaf: no graph to keep, and `.detach()` would turn it
    # into a plain tensor.
    "parameter_list": _case("""
        import torch
        from torch import nn


        class KAN(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.node_bias = nn.ParameterList()
                self.lin = nn.Linear(width, width)

            def expand(self, width, trainable):
                self.node_bias.append(nn.Parameter(torch.zeros(width)).requires_grad_(trainable))

            def forward(self, x):
                return self.lin(x) + sum(self.node_bias)


        def train(model, loader, optimizer):
            for x in loader:
                model(x).pow(2).mean().backward()
                optimizer.step()


        torch.manual_seed(0)
        kan = KAN(4)
        kan.expand(4, True)
        train(kan, [torch.randn(8, 4) for _ in range(2)], torch.optim.SGD(kan.parameters(), lr=0.1))
        assert kan.node_bias[0].grad is not None
        """),
    # What save_for_backward is given must be tensors: a list of tensors, a bool, a tuple stay on ctx.
    "save_for_backward_kinds": _case("""
        from typing import List
        import torch
        from torch import Tensor


        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, weights: List[Tensor], flag: bool):
                ctx.weights = weights
                ctx.flag = flag
                ctx.needs = x.requires_grad
                ctx.pair = (x.sum(dim=0), x.mean(dim=0))
                ctx.mask = x > 0
                return x * weights[0]

            @staticmethod
            def backward(ctx, grad):
                return grad * ctx.weights[0] * ctx.mask + ctx.pair[0] * 0, None, None


        x = torch.randn(3, 2, dtype=torch.double, requires_grad=True)
        w = [torch.randn(3, 2, dtype=torch.double)]
        y = Scale.apply(x, w, True)
        y.sum().backward()
        assert x.grad is not None
        """, ("GL101", "ctx.weights = weights"), ("GL101", "ctx.pair = (x.sum(dim=0)")),
    # A script's own loop: a function's local of the same name (`total` in `probe`) is another
    # variable; what the script keeps is only printed.
    "script": _case("""
        import torch
        import torch.nn.functional as F
        from torch import nn

        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)]


        def probe(x, y):
            total = F.mse_loss(model(x), y)
            total.backward()
            return total.item()


        total = 0.0
        losses = []
        for epoch in range(2):
            for x, y in data:
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                total += loss
                losses.append(loss)
        print(total / len(losses), max(losses), probe(*data[0]))
        """, ("GL104", "total += loss"), ("GL103", "losses.append(loss)"), fixed="""
        import torch
        import torch.nn.functional as F
        from torch import nn

        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)]


        def probe(x, y):
            total = F.mse_loss(model(x), y)
            total.backward()
            return total.item()


        total = 0.0
        losses = []
        for epoch in range(2):
            for x, y in data:
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                total += loss.item()
                losses.append(loss.item())
        print(total / len(losses), max(losses), probe(*data[0]))
        """),
    # Where the fix is right: losses from a criterion backward ran on (one element), a torch loss,
    # a tensor computed from a model's output; `.item()` where every later use takes a number,
    # `.detach()` where one needs a tensor (`torch.stack`), what is kept is not one element, or the
    # list is handed back (each loss had its backward: no caller can run another through it).
    "right_fixes": _case("""
        import numpy as np
        import torch
        import torch.nn.functional as F
        from torch import nn


        def train(model, loader, optimizer, criterion):
            losses, stacked, probs, per_sample = [], [], [], []
            total = 0.0
            running = 0.0
            for x, y in loader:
                optimizer.zero_grad()
                out = model(x)
                loss = criterion(out, y)
                loss.backward()
                optimizer.step()
                losses.append(loss)
                stacked.append(loss)
                probs.append(out.softmax(-1))
                per_sample.append((out - y).pow(2).mean(1))
                total += loss
                running = running + F.cross_entropy(out, y.argmax(1))
            print(sum(losses) / len(losses), np.mean(losses), total, running, torch.cat(per_sample).shape)
            print(torch.stack(stacked).mean().item(), torch.cat(probs).shape)
            assert all(isinstance(v, float) for v in losses)


        def history_of(model, loader, optimizer):
            kept = []
            for x, y in loader:
                loss = F.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                kept.append(loss)
            return kept


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                self.history = []
                self.epoch_loss = 0.0

            def fit(self, loader):
                for x, y in loader:
                    loss = F.mse_loss(self.model(x), y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    self.history.append(loss)
                    self.epoch_loss += loss
                print(self.epoch_loss / len(self.history))


        torch.manual_seed(0)
        net = nn.Linear(4, 3)
        data = [(torch.randn(8, 4), torch.randn(8, 3)) for _ in range(4)]
        before = net.weight.detach().clone()
        train(net, data, torch.optim.SGD(net.parameters(), lr=0.1), nn.MSELoss())
        assert not torch.equal(before, net.weight), "no longer trains"
        trainer = Trainer(nn.Linear(4, 3))
        trainer.fit(data)
        assert isinstance(trainer.epoch_loss, float)
        assert torch.stack(history_of(net, data, torch.optim.SGD(net.parameters(), lr=0.1))).shape == (4,)
        """, ("GL103", "losses.append(loss)"), ("GL103", "stacked.append(loss)"), ("GL103", "probs.append("),
        ("GL103", "per_sample.append("), ("GL104", "total += loss"), ("GL104", "running = running +"),
        ("GL103", "self.history.append(loss)"), ("GL104", "self.epoch_loss += loss"), ("GL103", "kept.append(loss)"),
        fixed="""
        import numpy as np
        import torch
        import torch.nn.functional as F
        from torch import nn


        def train(model, loader, optimizer, criterion):
            losses, stacked, probs, per_sample = [], [], [], []
            total = 0.0
            running = 0.0
            for x, y in loader:
                optimizer.zero_grad()
                out = model(x)
                loss = criterion(out, y)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                stacked.append(loss.detach())
                probs.append(out.softmax(-1).detach())
                per_sample.append((out - y).pow(2).mean(1).detach())
                total += loss.item()
                running = running + F.cross_entropy(out, y.argmax(1)).item()
            print(sum(losses) / len(losses), np.mean(losses), total, running, torch.cat(per_sample).shape)
            print(torch.stack(stacked).mean().item(), torch.cat(probs).shape)
            assert all(isinstance(v, float) for v in losses)


        def history_of(model, loader, optimizer):
            kept = []
            for x, y in loader:
                loss = F.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                kept.append(loss.detach())
            return kept


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                self.history = []
                self.epoch_loss = 0.0

            def fit(self, loader):
                for x, y in loader:
                    loss = F.mse_loss(self.model(x), y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    self.history.append(loss.item())
                    self.epoch_loss += loss.item()
                print(self.epoch_loss / len(self.history))


        torch.manual_seed(0)
        net = nn.Linear(4, 3)
        data = [(torch.randn(8, 4), torch.randn(8, 3)) for _ in range(4)]
        before = net.weight.detach().clone()
        train(net, data, torch.optim.SGD(net.parameters(), lr=0.1), nn.MSELoss())
        assert not torch.equal(before, net.weight), "no longer trains"
        trainer = Trainer(nn.Linear(4, 3))
        trainer.fit(data)
        assert isinstance(trainer.epoch_loss, float)
        assert torch.stack(history_of(net, data, torch.optim.SGD(net.parameters(), lr=0.1))).shape == (4,)
        """),
}


def _line_of(source: str, text: str) -> int:
    lines = [n for n, line in enumerate(source.splitlines(), 1) if text in line]
    assert len(lines) == 1, f"{text!r} must name one line"
    return lines[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_finding_stays_and_a_fix_is_offered_only_where_it_is_right_code(name):
    case = CASES[name]
    findings = lint_source(case.source, f"{name}.py", ALL).findings
    for code, text in case.flagged:
        line = _line_of(case.source, text)
        here = [f for f in findings if f.code == code and f.line == line]
        assert here, f"{code} is no longer reported on line {line} ({text!r})"
        if case.fixed is None:
            assert all(f.fix is None for f in here), f"{code} line {line}: a fix that breaks the code is offered"
    if case.fixed is None:
        # No GL103/GL104 fix anywhere in the file, and GL101's put only tensors into save_for_backward.
        assert not [f for f in findings if f.code in ("GL103", "GL104") and f.fix is not None]
    else:
        assert fix_source(case.source, f"{name}.py", ALL, unsafe=True).fixed_source == case.fixed
        assert fix_source(case.fixed, f"{name}.py", ALL, unsafe=True).fixed_source is None  # nothing left


_RUNNER = """
import json, runpy, sys, traceback
results = {}
for path in sys.argv[1:]:
    try:
        runpy.run_path(path, run_name="__main__")
        results[path] = "ok"
    except BaseException:
        results[path] = traceback.format_exc(limit=3)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Every case after `--fix --unsafe-fixes` (every rule), run in one Python with torch."""
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("unsafe_fixes")
    paths = {}
    for name, case in CASES.items():
        fixed = fix_source(case.source, f"{name}.py", ALL, unsafe=True).fixed_source
        path = folder / f"{name}.py"
        path.write_text(fixed if fixed is not None else case.source, encoding="utf-8")
        paths[name] = str(path)
    proc = subprocess.run([sys.executable, "-c", _RUNNER, *paths.values()], capture_output=True, text=True,
                          timeout=600, cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return {name: results[path] for name, path in paths.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fixed_script_still_runs_and_trains(name, ran):
    assert ran[name] == "ok", ran[name]
