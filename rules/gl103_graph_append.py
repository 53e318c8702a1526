from __future__ import annotations

from typing import Iterator

from gradlint import graph_store_precheck
from gradlint.analysis import FileModel, graph_kept_in_containers
from gradlint.findings import Applicability, Severity
from gradlint.rule import FixPlan, Hit, Invalid, Replace, Rule

_VERBS = {"append": "appended to", "appendleft": "appended to", "extend": "added to", "+=": "added to",
          "insert": "inserted into", "setitem": "stored into", "setdefault": "stored into", "update": "stored into"}


# Kept for a backward later (REINFORCE's episode, its helper's `torch.stack(...)`), kept by a
# Module's forward for its output, or handed to the caller before its backward ran: reported,
# never fixed.
_LEFT_ALONE = """
import torch
from torch import nn
from torch.distributions import Categorical
def finish_episode(optimizer, log_probs, returns):
    loss = -(torch.stack(log_probs) * returns).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    del log_probs[:]
def train(policy, env, optimizer, episodes):
    log_probs = []
    for episode in range(episodes):
        state = env.reset()
        for t in range(100):
            m = Categorical(policy(state))
            action = m.sample()
            log_probs.append(m.log_prob(action))
            state, reward, done = env.step(action)
        finish_episode(optimizer, log_probs, torch.ones(len(log_probs)))
def collect(model, loader, optimizer):
    seen = []
    for x in loader:
        loss = model(x).pow(2).mean()
        seen.append(loss)
        loss.backward()
        optimizer.step()
    return seen
"""


# PyG's layer-wise inference, a method of the model whose only caller in the file is decorated
# `@torch.no_grad()`; and the same with the decorator gone (reported, no fix offered).
_INFERENCE = """
import torch
from torch import nn
class SAGE(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
    def forward(self, x):
        for conv in self.convs:
            x = conv(x).relu()
        return x
    def inference(self, x_all, loader):
        for conv in self.convs:
            xs = []
            for n_id in loader:
                xs.append(conv(x_all[n_id]).cpu())
            x_all = torch.cat(xs, dim=0)
        return x_all
model = SAGE()
def train(loader, optimizer):
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
@torch.no_grad()
def test(x, loader):
    return model.inference(x, loader)
"""
_INFERENCE_WITH_GRAD = _INFERENCE.replace("@torch.no_grad()\n", "\n")
# The caller turns grad off around the call instead (PyG's distributed sampling example); under
# `enable_grad()` the same call keeps the graphs.
_INFERENCE_IN_BLOCK = _INFERENCE.replace(
    "@torch.no_grad()\ndef test(x, loader):\n    return model.inference(x, loader)\n",
    "def test(x, loader):\n    model.eval()\n    with torch.no_grad():\n        out = model.inference(x, loader)\n    return out\n")
_INFERENCE_IN_GRAD_BLOCK = _INFERENCE_IN_BLOCK.replace("torch.no_grad():", "torch.enable_grad():")
# A memo keyed by the step adds one value per step; keyed by a constant, one for good.
_MEMO_BY_STEP = """
import torch
def train(model, loader, optimizer):
    seen = {}
    first = {}
    for step, (x, y) in enumerate(loader):
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        if step not in seen:
            seen[step] = loss
        first.setdefault("loss", loss)
"""


class GraphAppend(Rule):
    code = "GL103"
    name = "graph-append"
    severity = Severity.ERROR
    summary = "a loss or model output kept in a list/dict that outlives the step"
    # A graph-attached value needs a backward() in the file or a model-like call (a training step
    # driven by a framework: Lightning's training_step; a rollout keeping a policy's log_prob; a
    # forward hook keeping its output),
    # and somewhere to keep it.
    # `torch.autograd.backward(` is a `.backward(`; `autograd.grad` alone is also `autograd.grad_mode`
    # and `gradcheck`, which train nothing.
    markers = (".backward(", "autograd.grad(", "training_step", "register_forward_hook",
               *((op, call) for op in ("append(", "insert(", "extend(", "] =", "+= [") for call in ("model(", "net(", "criterion(", "loss_fn(", "log_prob(")))
    fix_safety = "unsafe"
    doc = """
## What it does
Flags a graph-attached tensor (a loss, a model output, anything computed from them without
`.detach()`/`.item()`) appended, extended, inserted or stored by key into a list or dict that
outlives the training step: one created before the training loop (or before a rollout loop,
where it keeps every environment step's graph), a module-level global, an attribute, a closure
variable, or a parameter (the caller's list) that the def fills in a training or rollout loop of
its own. Not an input of a Module's forward: the data of one call, fresh from the loader every
step (DLA's `children.append(x)`, PyG's `x_dict["user"] = ...` in forward; as forward inputs are
not assumed graph-attached, nor are they assumed to outlive the step); nor any other parameter
stored into once per call (a sampled graph's `pos_g.ndata["emb"] = ...`, a `**kwargs` dict, the
output being scaled): its lifetime is the caller's. A helper of the same file
that adds what its caller passes to a list its caller passes (`remember(history, loss)` with
`buf.append(value)`) is reported at the call, where the list is known; so is one left to a
default that names a module-level list (`def log_loss(value, buf=HISTORY)`). A def or a method
of another module of the project that does the same (`history.add(loss)` with a `History` class in
`utils/`, `remember(loss)` appending to that module's global) is reported at the call, with the
line of that def in the message. In a file that calls
backward(), a forward hook's `output` (and `input`) is a module call's output: graph-attached
(feature extraction runs its forwards under `no_grad`). Step functions with no loop
count too: the caller loops. What a module's forward keeps on itself counts as graph-attached
when it is read back from an instance of that class in the same file
(`history.append(model.last_logits)` after `self.last_logits = logits`). A store into one fixed
slot (`last["loss"] = loss`) replaces the previous step's value and is reported as a warning: it
holds one step's graph, not all of them. A memo, stored only where its key is absent (`if k not
in cache: cache[k] = v`, `cache.setdefault(k, v)`), keeps one value per key and is not reported
unless its key is made afresh in the loop (`if step not in seen: seen[step] = loss` grows).
Only in a file whose code (not a comment or docstring) shows training: a `.backward(` (also
`torch.autograd.backward(`), an `autograd.grad(`, a `training_step`, a forward hook, or a model,
criterion, `loss_fn` or `log_prob` call's result added to a container; elsewhere (library code,
inference helpers usually called under `no_grad`) nothing is reported. Code under
`torch.no_grad()` makes no graph: a block, a decorated def (also by a decorator of the project
whose def names `no_grad` or `inference_mode`: yolov5's `@smart_inference_mode()`), and a method
that only such code of the file calls (PyG's layer-wise `inference`, called only from a
`@torch.no_grad()` test function).

## Why is this bad?
Measured on torch 2.13: `losses.append(loss)` after `backward()` keeps each step's autograd
graph nodes alive (about 6 KB of C++ graph per step in a small MLP, 704 nodes after 100 steps);
appending an output when backward is not run (evaluation outside `torch.no_grad()`) keeps all
the step's activations and saved tensors: 658440 B/step in the reference model. Nothing is
freed until the list goes.

A list built across a loop inside one step (collect per-layer outputs, then `torch.cat`) is fine
and not reported. So is a list the file later runs backward through and then empties: an
episode's log-probabilities in REINFORCE (`del policy.saved_log_probs[:]` after the update), an
A2C update's rollout lists made anew for each update (in a def or in a script's top-level code),
the losses of gradient accumulation; the graphs are needed and go with each update. A list that is
emptied every epoch but never trained through (a loss history for logging) is still reported: it
holds an epoch of graphs for nothing.

## Example
```python
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss)
```

## Use instead
```python
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
```

## Fix safety
Unsafe: the value is stored as `.item()` (a Python float afterwards) or `.detach()` (a tensor
without a graph). Offered for `append`, `insert` and `container[key] = value`, and only where the
result is still right code; otherwise the finding stays, without a fix:
- `.item()` only on a tensor proven to hold one element (a full reduction such as `.mean()` or
  `.sum()` with no dim, a torch loss with its default reduction, a name `backward()` ran on, or
  arithmetic of those with numbers), and only when every later use of the container takes
  numbers (not `torch.stack(losses)`, not `losses[-1].cpu()`); `.detach()` otherwise.
- Never on what is not proven a tensor: a module's output (as often a tuple, a dict or a
  ModelOutput), something read out of one (`out["loss"]`, `out.logits`), a hook's output, a
  tensor-or-None, a parameter.
- Never when a backward the file shows reads what the container holds (REINFORCE's
  `torch.stack(log_probs).sum().backward()`, in the function or in a helper of the file it is
  passed to; a memory bank the step's loss reads), nor, unless backward already ran on the
  value, when the container leaves what the file shows: returned, passed to another file's code,
  the caller's list, another object's attribute, or self's when a method the file does not
  define may read it. A returned list of losses backward ran on gets `.detach()`.
- Never in a Module's forward or a method it runs: what it keeps may make the output, and a
  detached copy silently stops training through that path.
"""
    VALID = (
        # A forward hook's buffer another method empties around each read (BYOL's NetWrapper).
        """
import torch
from torch import nn
class NetWrapper(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.hidden = {}
        net[-2].register_forward_hook(self._hook)
    def _hook(self, _, input, output):
        self.hidden[input[0].device] = output.flatten(1)
    def get_embedding(self, x):
        self.hidden.clear()
        self.net(x)
        hidden = self.hidden[x.device]
        self.hidden.clear()
        return hidden
def train(wrapper, loader, opt):
    for x in loader:
        wrapper.get_embedding(x).sum().backward()
        opt.step()
""",
        # Stores into what the caller passes, once per call: the caller's per-step data (a sampled
        # graph, a **kwargs dict, the output being scaled), whose lifetime is the caller's.
        """
import torch
from torch import nn
class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
    def embed_entity(self, x):
        return self.lin(x)
class KEModel(object):
    def __init__(self, dim):
        self.transform_net = MLP(dim)
    def forward(self, pos_g, **kwargs):
        pos_g.ndata["emb"] = self.transform_net.embed_entity(pos_g.ndata["feat"])
        kwargs["inputs_embeds"] = self.transform_net(kwargs.pop("x"))
        return pos_g, kwargs
    def scale(self, y_hat):
        for i in range(y_hat.shape[1]):
            y_hat[:, i] = torch.sigmoid(self.transform_net(y_hat)[:, i])
        return y_hat
""",

        # DGL: a batched graph from the loader, new every step, carries the features on its ndata.
        """
import torch
from torch import nn
class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def forward(self, g, h):
        h = torch.relu(self.lin(h))
        g.ndata["h"] = h
        g.edata["w"] = h.sum()
        return h
def train(model, loader, optimizer):
    for g, h in loader:
        loss = model(g, h).sum()
        loss.backward()
        optimizer.step()
""",
        # PyG's layer-wise inference: a method every caller in the file runs under no_grad.
        _INFERENCE,
        _INFERENCE_IN_BLOCK,
        # A forward's inputs are one call's data: the parent's list is made afresh per call (timm's
        # DLA Tree), a batch is fresh from the loader every step.
        """
import torch
from torch import nn
class Tree(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def forward(self, x, children=None):
        children = [] if children is None else children
        h = torch.relu(self.lin(x))
        children.append(h)
        return torch.cat(children)
def train(model, loader, optimizer):
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
""",
        # A hook's handle, not a tensor: register_* methods of a module return None or a handle
        # (torch's fsdp keeps them in lists), `forward_` in the name notwithstanding.
        """
import torch
def register(state, module: torch.nn.Module, hook):
    state.handles.append(module.register_forward_pre_hook(hook, prepend=True))
    loss = module(torch.ones(2)).sum()
    loss.backward()
""",
        # One store per epoch, between the epochs' steps: no per-step accumulation.
        """
def fit(model, loader, optimizer, epochs):
    history = []
    for epoch in range(epochs):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        history.append(model(x).mean())
""",
        # A2C: the rollout's log-probs and values are what the update's loss backwards through.
        """
import torch
def a2c(model, envs, optimizer, num_steps, updates):
    state = envs.reset()
    for update in range(updates):
        log_probs, values, rewards = [], [], []
        entropy = 0
        for _ in range(num_steps):
            dist, value = model(torch.as_tensor(state))
            action = dist.sample()
            state, reward, done, _ = envs.step(action.numpy())
            log_probs.append(dist.log_prob(action))
            values.append(value)
            rewards.append(reward)
            entropy += dist.entropy().mean()
        adv = torch.tensor(rewards) - torch.cat(values)
        loss = -(torch.cat(log_probs) * adv.detach()).mean() + adv.pow(2).mean() - 0.01 * entropy
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""",
        # avalanche's L2P: the dict is made anew on its branch just before it is filled.
        """
import torch
class Strategy:
    def forward(self):
        if self.use_vit:
            self.res = self.model(x=self.mb_x)
        else:
            self.res = {}
            self.res["logits"] = self.model(x=self.mb_x)
        return self.res["logits"]
    def train(self):
        for self.mb_x, y in self.loader:
            loss = torch.nn.functional.cross_entropy(self.forward(), y)
            loss.backward()
            self.optimizer.step()
""",
        # A pipeline stage's micro-batches: one step's parts, backwarded within the step.
        """
import torch
def run_step(module, images, optimizer, args):
    optimizer.zero_grad()
    outputs = []
    for microbatch in range(args.microbatches):
        outputs.append(module(images.chunk(args.microbatches)[microbatch]))
    torch.cat(outputs).sum().backward()
    optimizer.step()
""",
        # The same A2C at a script's top level (spikingjelly's examples): read as a def is.
        """
import torch
from torch import nn
class ActorCritic(nn.Module):
    def forward(self, x):
        return torch.distributions.Categorical(logits=x), x.sum()
if __name__ == "__main__":
    model = ActorCritic()
    envs, optimizer = make()
    state = envs.reset()
    while True:
        log_probs, values, rewards = [], [], []
        entropy = 0
        for _ in range(5):
            dist, value = model(torch.as_tensor(state))
            action = dist.sample()
            state, reward, done, _ = envs.step(action.numpy())
            log_probs.append(dist.log_prob(action))
            values.append(value)
            rewards.append(reward)
            entropy += dist.entropy().mean()
        log_probs = torch.cat(log_probs)
        adv = torch.tensor(rewards) - torch.cat(values)
        loss = -(log_probs * adv.detach()).mean() + adv.pow(2).mean() - 0.01 * entropy
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""",
        # Forwards under no_grad only (a file that never calls backward).
        """
import torch
FEATURES = []
def keep(module, inputs, output):
    FEATURES.append(output)
def extract(model, loader):
    model[0].register_forward_hook(keep)
    with torch.no_grad():
        for x in loader:
            model(x)
""",
        # A Dataset's transforms run outside any training step and hold no parameters.
        """
from torch import nn
from torch.utils.data import Dataset
class CachedImages(Dataset):
    def __init__(self, images):
        self.images = images
        self.transform = nn.Sequential(nn.Upsample(size=224), nn.Identity())
        self.cache = {}
    def __getitem__(self, i):
        if i not in self.cache:
            self.cache[i] = self.transform(self.images[i])
        return self.cache[i]
def train(model, loader, opt):
    for x, y in loader:
        model(x).sub(y).pow(2).mean().backward()
        opt.step()
""",
        # A schedule's per-micro-batch losses, emptied by another of its methods each round.
        """
class Schedule:
    def __init__(self, loss_fn):
        self.loss_fn = loss_fn
        self.losses = []
    def run_microbatch(self, output, target):
        self.losses.append(self.loss_fn(output, target))
    def collect_losses(self, out):
        out.extend(self.losses)
        self.losses.clear()
""",
        # Integer outputs never require grad; a rollout's lists are made anew for each update and
        # trained through by it (`env.step` advances a simulator, not an optimizer).
        """
import torch
def train(model, loader, opt, env, obs):
    predictions = []
    for x, y in loader:
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        predictions.append(logits.argmax(1))
    for update in range(100):
        values, rewards = [], []
        for t in range(5):
            values.append(model(obs))
            obs, reward = env.step(0)
            rewards.append(reward)
        loss = torch.stack(values).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
""",
        # A frozen teacher's outputs, argmax indices, an action sampled from a policy: no graph.
        """
import torch
def distill(student, teacher, loader, opt):
    teacher.requires_grad_(False)
    cache, preds, actions = {}, [], []
    for idx, x, y in loader:
        if int(idx) not in cache:
            cache[int(idx)] = teacher(x)
        logits = student(x)
        preds.append(torch.max(logits, dim=1).indices)
        actions.append(policy(x).sample())
        logits.sum().backward()
        opt.step()
""",
        # Gradients without create_graph carry no graph: keeping their norms' tensors is no GL103.
        """
import torch
GRAD_NORMS = []
def step(model, x, params):
    loss = model(x).sum()
    grads = torch.autograd.grad(loss, params)
    GRAD_NORMS.append(torch.stack([g.norm() for g in grads]))
""",
        """
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    losses.append(loss.item())
    preds = []
    preds.append(model(x))
""",
        """
import torch
def evaluate(model, loader):
    outputs = []
    with torch.no_grad():
        for x in loader:
            outputs.append(model(x))
    return outputs
""",
        """
import torch
import torch.nn.functional as F
def loss_value(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y).item()

@torch.no_grad()
def val_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)

def train(model, loader, val_batch):
    seen, val = [], []
    for batch in loader:
        seen.append(loss_value(model, batch))
        val.append(val_loss(model, val_batch))
""",
        """
import torch
from torch.distributions import Categorical
class Agent:
    def act(self, state):
        probs = self.policy(state)
        action = torch.multinomial(probs, 1)
        self.saved_log_probs.append(probs.gather(1, action).log())
        return action.item()

    def finish_episode(self, returns):
        loss = torch.cat([-lp * r for lp, r in zip(self.saved_log_probs, returns)]).sum()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        del self.saved_log_probs[:]
""",
        """
def train(model, loader, optimizer, accumulate):
    pending = []
    for i, (x, y) in enumerate(loader):
        pending.append(model(x).sub(y).pow(2).mean())
        if len(pending) == accumulate:
            optimizer.zero_grad()
            torch.stack(pending).mean().backward()
            optimizer.step()
            pending.clear()
""",
        """
import torch
def forward_all(layers, x):
    outs = []
    for layer in layers:
        outs.append(layer(x))
    return torch.cat(outs)
""",
    )
    INVALID = (
        # A fresh tensor filled with the model's output through slice writes carries its graph
        # (CopySlices), through an alias too (theseus's poses helper); the caller keeps its rows.
        Invalid("""
import torch
def poses(values, steps):
    obj = torch.empty(4, steps, 3)
    eff = torch.empty(4, steps, 3)
    for key in ["obj", "eff"]:
        ret = obj if key == "obj" else eff
        for t in range(steps):
            ret[:, t, :2] = values[t][:, 0:2]
    return obj, eff
def train(model, loader, opt, steps):
    kept = []
    for x, y in loader:
        obj, eff = poses(model(x), steps)
        loss = (obj - y).norm()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.extend([p for p in obj])
    return kept
""", ("kept.extend([p for p in obj])",)),
        # The caller's list, kept across the training loop this def runs itself.
        Invalid("""
def train(model, loader, optimizer, history):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        history.append(loss)
""", ("history.append(loss)",)),
        # PPO's rollout outside no_grad: every environment step's graph is kept, then only detached.
        Invalid("""
import torch
def collect(model, envs, num_steps, updates):
    state = envs.reset()
    for update in range(updates):
        log_probs = []
        for _ in range(num_steps):
            dist, value = model(torch.as_tensor(state))
            action = dist.sample()
            state, reward, done, _ = envs.step(action.numpy())
            log_probs.append(dist.log_prob(action))
        old_log_probs = torch.cat(log_probs).detach()
        ppo_update(model, old_log_probs)
""", ("log_probs.append(dist.log_prob(action))",)),
        # The same at a script's top level: the def that runs backward takes a parameter named
        # `log_probs`, but what it is given is the detached copy, not the script's list.
        Invalid("""
import torch
from torch import nn
class ActorCritic(nn.Module):
    def forward(self, x):
        return torch.distributions.Categorical(logits=x), x.sum()
def ppo_update(model, optimizer, log_probs, returns):
    ratio = (model.log_prob() - log_probs).exp()
    loss = -(ratio * returns).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if __name__ == "__main__":
    model = ActorCritic()
    envs, optimizer = make()
    state = envs.reset()
    while True:
        log_probs, rewards = [], []
        for _ in range(5):
            dist, value = model(torch.as_tensor(state))
            action = dist.sample()
            state, reward, done, _ = envs.step(action.numpy())
            log_probs.append(dist.log_prob(action))
            rewards.append(reward)
        log_probs = torch.cat(log_probs).detach()
        ppo_update(model, optimizer, log_probs, torch.tensor(rewards))
""", ("log_probs.append(dist.log_prob(action))",)),
        # A helper's list left to its default, a module-level list: that list grows.
        Invalid("""
import torch
HISTORY = []
def log_loss(value, buf=HISTORY):
    buf.append(value)
def train(model, loader, opt):
    for x in loader:
        loss = model(x).mean()
        loss.backward()
        opt.step()
        log_loss(loss)
""", ("log_loss(loss)",)),
        # What a torch.compile'd def of the file returns is what the def returns.
        Invalid("""
import torch
def train_step(model, opt, x):
    loss = model(x).mean()
    loss.backward()
    opt.step()
    return loss
fast_step = torch.compile(train_step, mode="max-autotune")
def main(model, opt, loader):
    history = []
    for x in loader:
        history.append(fast_step(model, opt, x))
""", ("history.append(fast_step(model, opt, x))",)),
        # What `super().training_step(...)` returns is what the base class's method returns.
        Invalid("""
import lightning.pytorch as L
from torch import nn
class Regressor(L.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)
class Logged(Regressor):
    def __init__(self):
        super().__init__()
        self.losses = []
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.losses.append(loss)
        return loss
""", ("self.losses.append(loss)",)),
        # A helper appends what it is given to the list it is given: the caller's list outlives
        # the loop, the one made inside it does not, and a float keeps no graph.
        Invalid("""
import torch
def remember(buf, value, scale=1.0):
    kept = value * scale
    buf.append(kept)
def train(model, loader, opt):
    history = []
    for x, y in loader:
        loss = model(x).sub(y).pow(2).mean()
        loss.backward()
        opt.step()
        remember(history, loss, scale=2.0)
        fresh = []
        remember(fresh, loss)
        remember(history, loss.item())
""", ("remember(history, loss, scale=2.0)",)),
        # Another function trains through and empties a list of the same name; the `loss` made
        # from this list after the loop is not what the loop's backward trained.
        Invalid("""
import torch
import torch.nn.functional as F
def accumulate(model, batches, opt):
    losses = []
    for x, y in batches:
        losses.append(F.cross_entropy(model(x), y))
    torch.stack(losses).mean().backward()
    losses.clear()

def train(model, loader, opt, epochs):
    losses = []
    for epoch in range(epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
        loss = torch.stack(losses).mean()
        print(epoch, loss.item())
        losses.clear()
""", ("losses.append(loss)",)),
        Invalid("""
from torch import nn
FEATURES = []
activation = {}
def keep_output(module, inputs, output):
    FEATURES.append(output)
def get_activation(name):
    def hook(module, inputs, output):
        activation[name] = output
    return hook
class Recorder:
    def __init__(self):
        self.outputs = []
    def __call__(self, module, inputs, out):
        self.outputs.append(out.detach())
recorder = Recorder()
net = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
net[0].register_forward_hook(keep_output)
net[1].register_forward_hook(get_activation("relu"))
net[1].register_forward_hook(recorder)
def train_step(x):
    net(x).pow(2).mean().backward()
""", ("FEATURES.append(output)", "activation[name] = output")),
        Invalid("""
import torch
from torch import nn
class Trainer:
    def __init__(self):
        self.l1 = nn.Linear(16, 32)
        self.l2 = nn.Linear(32, 4)
        self.features = {}
    def train_step(self, step, x, y):
        h = torch.tanh(self.l1(x))
        self.features[f"step{step}"] = h
        loss = nn.functional.cross_entropy(self.l2(h), y)
        loss.backward()
""", ("self.features[f\"step{step}\"] = h",)),
        Invalid("""
import torch
def train_with_memory(model, loader, opt):
    memory = []
    for x, y in loader:
        emb = model(x)
        loss = emb.pow(2).mean()
        if memory:
            loss = loss + (emb @ torch.cat(memory).t()).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        memory.append(emb)
""", ("memory.append(emb)",)),
        Invalid("""
import torch.nn.functional as F
def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)

class Trainer:
    def loss_of(self, batch):
        return compute_loss(self.model, batch)

    def fit(self, loader):
        for batch in loader:
            loss = self.loss_of(batch)
            loss.backward()
            self.history.append(loss)
""", ("self.history.append(loss)",), fixed="""
import torch.nn.functional as F
def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)

class Trainer:
    def loss_of(self, batch):
        return compute_loss(self.model, batch)

    def fit(self, loader):
        for batch in loader:
            loss = self.loss_of(batch)
            loss.backward()
            self.history.append(loss.item())
"""),
        Invalid("""
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss)
""", ("losses.append(loss)",), fixed="""
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
"""),
        Invalid("""
import torch.nn.functional as F
HISTORY = []
STATS = {}
def train_step(model, batch):
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    HISTORY.append(loss)
    STATS[len(HISTORY)] = loss
""", ("HISTORY.append(loss)", "STATS[len(HISTORY)] = loss")),
        # A model's output may be a tuple, a dict or a ModelOutput (no `.detach()`): reported, not
        # fixed; a tensor computed from it is one.
        Invalid("""
class Trainer:
    def __init__(self, model):
        self.model = model
        self.outputs, self.probs = [], []
    def step(self, batch):
        out = self.model(batch)
        self.outputs.append(out)
        self.probs.append(out.softmax(dim=-1))
""", ("self.outputs.append(out)", "self.probs.append(out.softmax(dim=-1))"), fixed="""
class Trainer:
    def __init__(self, model):
        self.model = model
        self.outputs, self.probs = [], []
    def step(self, batch):
        out = self.model(batch)
        self.outputs.append(out)
        self.probs.append(out.softmax(dim=-1).detach())
"""),
        Invalid(_LEFT_ALONE, ("log_probs.append(m.log_prob(action))", "seen.append(loss)"),
                fixed=_LEFT_ALONE),
        # The same inference called with grad on (no decorator on its only caller).
        Invalid(_INFERENCE_WITH_GRAD, ("xs.append(conv(x_all[n_id]).cpu())",), fixed=_INFERENCE_WITH_GRAD),
        Invalid(_INFERENCE_IN_GRAD_BLOCK, ("xs.append(conv(x_all[n_id]).cpu())",), fixed=_INFERENCE_IN_GRAD_BLOCK),
        Invalid(_MEMO_BY_STEP, ("seen[step] = loss",),
                fixed=_MEMO_BY_STEP.replace("seen[step] = loss\n", "seen[step] = loss.item()\n")),
        Invalid("""
class Trainer:
    def step(self, batch):
        rec, codes = self.model(batch)
        self.outputs.append({"rec": rec, "codes": codes})
""", ("self.outputs.append({\"rec\": rec, \"codes\": codes})",), fixed="""
class Trainer:
    def step(self, batch):
        rec, codes = self.model(batch)
        self.outputs.append({"rec": rec, "codes": codes})
"""),
        Invalid("""
import torch
PENALTIES = []
def critic_step(critic, real, fake, eps):
    interp = (eps * real + (1 - eps) * fake).requires_grad_(True)
    grads, = torch.autograd.grad(critic(interp).sum(), interp, create_graph=True)
    gp = ((grads.norm(2, dim=1) - 1) ** 2).mean()
    gp.backward()
    PENALTIES.append(gp)
""", ("PENALTIES.append(gp)",), fixed="""
import torch
PENALTIES = []
def critic_step(critic, real, fake, eps):
    interp = (eps * real + (1 - eps) * fake).requires_grad_(True)
    grads, = torch.autograd.grad(critic(interp).sum(), interp, create_graph=True)
    gp = ((grads.norm(2, dim=1) - 1) ** 2).mean()
    gp.backward()
    PENALTIES.append(gp.item())
"""),
        Invalid("""
from torch.distributions import Normal
def rollout(policy, env, buffer, steps):
    obs = env.reset()
    for t in range(steps):
        dist = Normal(policy(obs), 1.0)
        action = dist.sample()
        buffer.actions.append(action)
        buffer.log_probs.append(dist.log_prob(action).sum())
        obs = env.step(action)
""", ("buffer.log_probs.append(dist.log_prob(action).sum())",)),
        Invalid("""
class Trainer:
    def fit(self, loader, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                loss = self.criterion(self.model(x), y)
                loss.backward()
                self.epoch_losses.append(loss)
            print(sum(l.item() for l in self.epoch_losses))
            self.epoch_losses.clear()
""", ("self.epoch_losses.append(loss)",)),
        Invalid("""
EMBEDDINGS = []
def embed_batch(model, tokens):
    global EMBEDDINGS
    emb = model(tokens).mean(dim=1)
    EMBEDDINGS += [emb]
    return emb
""", ("EMBEDDINGS += [emb]",)),
    )

    def precheck(self, tree) -> bool:
        return graph_store_precheck.may_store_across_steps(tree)

    def check(self, model: FileModel) -> Iterator[Hit]:
        for keep in graph_kept_in_containers(model):
            instead = keep.keep_instead
            fix = None if instead is None else FixPlan(
                f"Store .{instead.method}()", Applicability.UNSAFE, (Replace(instead.node, instead.text),))
            by = f" by {keep.through}()" if keep.through else ""
            if keep.at is not None:  # the store is in another module: name it, and what it keeps
                yield Hit(keep.node, (
                    f"{keep.through}() ({keep.at}) keeps a graph-attached tensor in {keep.container}: "
                    + ("its step's graph until overwritten" if keep.overwrites else "every step's graph")
                    + "; pass .item()"), Severity.WARNING if keep.overwrites else None, keep.holder)
                continue
            if keep.overwrites:  # one slot, replaced every step: one step's graph, not all
                yield Hit(keep.node, (
                    f"a graph-attached tensor in {keep.container}{by} keeps its step's graph "
                    "until overwritten; store .item() or .detach()"), Severity.WARNING, keep.holder, fix)
                continue
            if keep.origin is not None and keep.at is None:  # decided by another module: name it
                yield Hit(keep.node, (
                    f"{keep.origin} gives a graph; {keep.container} keeps every step's graph{by}: "
                    "store .item()"), subject=keep.holder, fix=fix)
                continue
            verb = _VERBS.get(keep.method, "added to")
            yield Hit(keep.node, (
                f"a graph-attached tensor {verb} {keep.container}{by} keeps every step's graph; "
                "store .item() or .detach()"), subject=keep.holder, fix=fix)
