from __future__ import annotations

from typing import Iterator

from gradlint import prechecks
from gradlint.analysis import GLOBAL, SELF_ATTRIBUTE, SELF_CONTAINER, FileModel, graph_kept_by_module_forward
from gradlint.findings import Severity
from gradlint.rule import Hit, Invalid, Rule


class SelfTensorAttribute(Rule):
    code = "GL102"
    name = "self-tensor-attribute"
    severity = Severity.ERROR
    summary = "a graph-attached tensor kept on a module (or a global) across steps"
    # `def forward` alone: a class whose base is another module's class (`class Probe(Regressor)`)
    # is a torch module by the project, in a file that may never spell `nn.` or `Module`.
    markers = ("def forward",)
    doc = """
## What it does
Flags, inside an `nn.Module`'s `forward` (or a method of the module that forward calls on
self), a graph-attached tensor (the result of a submodule
call, or anything computed from parameters) that is assigned to `self.x`, appended to or stored
into a container attribute of `self`, or assigned to a module-level global. A submodule is what
`__init__` builds (`nn.Linear(...)`, a module class), or, where `__init__` sets it from a call
that cannot be read (`build(config)`, a constructor argument) or not at all, an attribute named
like one (`self.encoder`, `self.teacher_network`).

## Why is this bad?
What torch 2.13 does, measured:
- `self.history.append(h)` keeps every step's activation and its graph: memory grows by one
  activation per step (131072 B/step in the reference loop) and `gc.collect()` frees none of it.
- A chained update (`self.h = f(self.h)`, `self.ema = 0.99 * self.ema + 0.01 * feat`) links each
  step's graph to the previous one: the graph grows every step until the run dies.
- A plain `self.cache = h` keeps one step's graph and activations alive until the next step
  overwrites it (a one-step delay, reported as a warning). So does one fixed slot of a list or
  dict (`self.g.ndata["z"] = z` in DGL's GAT tutorial, `self.buf[0] = h`).
- Writing into a buffer in place (`self.protos[c] = f.mean(0)`, a MoCo queue filled outside
  `no_grad`) gives the buffer a grad_fn (CopySlices) on top of the last write's: the graph grows
  by 4 nodes every step (406 nodes after 100 steps of a prototype update, measured) and is never
  freed; a branch backward never runs through keeps its saved tensors too.
- A module-level global assigned in forward is the same: chained from its previous value it grows
  the graph every step (an error); assigned afresh it holds one step's graph until the next
  (a warning).

Values computed under `torch.no_grad()`, `.detach()`ed values and buffer updates under
`no_grad` are fine. A Module's forward inputs are not assumed graph-attached (precision first).
So is an entry taken out again on every path later in the same call (DGL's `self.g.ndata["h"]
= h; self.g.update_all(...); h = self.g.ndata.pop("h")`, `del`, `clear()`). A memo is fine too:
a value stored only where its key is absent (`if k not in self.cache:
self.cache[k] = v`, `self.cache.setdefault(k, v)`) is never replaced, so the cache holds one
value per key (timm's per-device attention-bias caches), not one per step.

## Example
```python
class Encoder(nn.Module):
    def forward(self, x):
        h = self.mlp(x)
        self.activations.append(h)
        self.ema = 0.99 * self.ema + 0.01 * h.mean(0)
        return h
```

## Use instead
```python
class Encoder(nn.Module):
    def forward(self, x):
        h = self.mlp(x)
        self.activations.append(h.detach())
        with torch.no_grad():
            self.ema.mul_(0.99).add_(0.01 * h.mean(0))
        return h
```
"""
    VALID = (
        # A cache set once and computed with afterwards (DGL's TWIRLSConv): a graph in it would make
        # the next step's backward raise, so working code keeps none there.
        """
import torch
from torch import nn
class Propagate(nn.Module):
    def forward(self, graph, feat):
        return graph @ feat
class TWIRLSConv(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.unfolding = Propagate()
        self.mlp = nn.Linear(dim, dim)
        self.cached_unfolding = None
    def forward(self, graph, feat):
        if self.cached_unfolding is None:
            self.cached_unfolding = self.unfolding(graph, feat)
        x = self.cached_unfolding
        return self.mlp(x)
""",
        # New tensors shaped after the output carry none of its graph (SuperGATConv's labels).
        """
import torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def forward(self, x):
        out = self.lin(x)
        self.att_y = out.new_zeros(out.size(0))
        self.att_y[:2] = 1.0
        self.mask = torch.zeros_like(out, dtype=torch.bool)
        self.noise = torch.randn_like(out)
        self.leaf = out.new_ones(3, requires_grad=True)
        return out
""",
        # timm's attention-bias cache: filled once per device, never replaced.
        """
import torch
from torch import nn
class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.biases = nn.Parameter(torch.zeros(4, 16))
        self.register_buffer("idxs", torch.zeros(8, 8, dtype=torch.long))
        self.cache = {}
        self.by_dtype = {}
    def get_biases(self, device):
        key = str(device)
        if key not in self.cache:
            self.cache[key] = self.biases[:, self.idxs]
        return self.cache[key]
    def forward(self, x):
        if x.dtype in self.by_dtype:
            pass
        else:
            self.by_dtype[x.dtype] = self.biases * 2
        self.by_dtype.setdefault(x.device, self.biases * 3)
        return x + self.get_biases(x.device).sum() + self.by_dtype[x.dtype].sum()
""",
        """
import torch
from torch import nn
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Linear(8, 8)
        self.register_buffer("ema", torch.zeros(8))
        self.activations = []
    def forward(self, x):
        h = self.mlp(x)
        self.activations.append(h.detach())
        self.last_norm = h.norm().item()
        self.last_input = x
        with torch.no_grad():
            self.ema = 0.99 * self.ema + 0.01 * h.mean(0)
        return h
""",
        """
import torch
from torch import nn
class Queue(nn.Module):
    def __init__(self):
        super().__init__()
        self.key_encoder = nn.Linear(8, 8)
        self.register_buffer("queue", torch.zeros(64, 8))
        self.register_buffer("centers", torch.zeros(4, 8))
    def forward(self, x, ptr, label):
        with torch.no_grad():
            keys = self.key_encoder(x)
        self.queue[ptr:ptr + x.shape[0]] = keys
        q = self.key_encoder(x)
        self.centers[label] = q.detach().mean(0)
        out = torch.zeros(4, 8)
        out[label] = q.mean(0)
        return q, out
""",
        """
import torch.nn as nn
class Net(nn.Module):
    def forward(self, x):
        outs = []
        for layer in self.layers:
            x = layer(x)
            outs.append(x)
        return outs
""",
        # A parameter made with requires_grad=False (tsai's fixed ROCKET kernels) trains nothing:
        # the convolution of the input with it carries no graph.
        """
import torch
import torch.nn as nn
import torch.nn.functional as F
class Rocket(nn.Module):
    def __init__(self, kernels):
        super().__init__()
        self.kernels = nn.Parameter(kernels, requires_grad=False)
    def forward(self, x):
        C = F.conv1d(x, self.kernels)
        self.biases = C.quantile(0.5, dim=-1)
        return C
""",
        # Random parameters drawn from the input's shape alone (kornia's augmentations): a method
        # named like the model's own computation, given no tensor, computes from no step's input.
        """
import torch.nn as nn
class RandomMix(nn.Module):
    def forward(self, x):
        self._params = self.forward_parameters(x.shape)
        return self.apply_mix(x, self._params)
""",
        # A module calling its own forward (unsloth's RoPE tables): that forward, walked, computes
        # from a buffer and arange, so the cached tables hold no graph.
        """
import torch
from torch import nn
class RopeTables(nn.Module):
    def __init__(self, bands):
        super().__init__()
        self.register_buffer("bands", bands)
        self._tables = {}
    def forward(self, length):
        t = torch.arange(length).float()
        return torch.outer(t, self.bands)
    def tables(self, length, device):
        key = (int(length), device)
        hit = self._tables.get(key)
        if hit is not None:
            return hit
        rope = self.forward(length)
        entry = self._tables[key] = (rope.cos(), rope.sin())
        return entry
class Model(nn.Module):
    def __init__(self, bands):
        super().__init__()
        self.rope = RopeTables(bands)
        self.lin = nn.Linear(8, 8)
    def forward(self, x):
        return self.lin(x) * self.rope.tables(x.shape[1], x.device)[0]
""",
        # register_parameter(name, None) registers None: the counter is the int64 buffer the
        # other branch registers (speechbrain's quaternion batch norm).
        """
import torch
import torch.nn as nn
class Norm(nn.Module):
    def __init__(self, track_running_stats=True):
        super().__init__()
        if track_running_stats:
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.register_parameter("num_batches_tracked", None)
    def forward(self, x):
        if self.num_batches_tracked is not None:
            self.num_batches_tracked = self.num_batches_tracked + 1
        return x
""",
    )
    INVALID = (
        # A method called on self reaches its own class hierarchy's def only: the greedy searcher's
        # forward_step runs from its base's @torch.no_grad() forward (quiet), the beam searcher's
        # from a forward with grad on (speechbrain's decoders).
        Invalid("""
import torch
from torch import nn
class Searcher(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
class GreedySearcher(Searcher):
    @torch.no_grad()
    def forward(self, x):
        for _ in range(3):
            x = self.forward_step(x)
        return x
class CachedGreedySearcher(GreedySearcher):
    def forward_step(self, x):
        out = self.proj(x)
        self.cache = out
        return out
class BeamSearcher(Searcher):
    def forward(self, x):
        return self.forward_step(x)
    def forward_step(self, x):
        out = self.proj(x)
        self.last = out
        return out
""", ("self.last = out",)),
        # A cache another method empties every round (speechbrain's attention, reset() per batch):
        # per-round state that holds the round's graph until the next.
        Invalid("""
import torch
from torch import nn
class ContentAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.mlp_enc = nn.Linear(dim, dim)
        self.precomputed_enc_h = None
    def reset(self):
        self.precomputed_enc_h = None
    def forward(self, enc_states, dec_h):
        if self.precomputed_enc_h is None:
            self.precomputed_enc_h = self.mlp_enc(enc_states)
        return torch.tanh(self.precomputed_enc_h + dec_h)
""", ("self.precomputed_enc_h = self.mlp_enc(enc_states)",)),
        # Set once and never computed with: the first step's graph, kept for good.
        Invalid("""
import torch
from torch import nn
class Probe(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.first_out = None
    def forward(self, x):
        out = self.lin(x)
        if self.first_out is None:
            self.first_out = out
        return out
""", ("self.first_out = out",)),
        # DGL's message passing on a graph kept on the module: what is popped on every path after
        # the store lives one call (gcn), what is popped only on some (a branch) or after a
        # return may stay, and what is never popped stays.
        Invalid("""
import torch
from torch import nn
class GCNConv(nn.Module):
    def __init__(self, g, dim):
        super().__init__()
        self.g = g
        self.weight = nn.Parameter(torch.randn(dim, dim))
    def forward(self, x, keep=False):
        self.g.ndata["x"] = x @ self.weight
        self.g.update_all(self.msg, self.reduce)
        x = self.g.ndata.pop("x")
        self.g.ndata["h"] = x @ self.weight
        if not keep:
            del self.g.ndata["h"]
        self.g.edata["e"] = x @ self.weight
        if keep:
            return x
        self.g.edata.pop("e")
        self.g.ndata["y"] = x @ self.weight
        self.g.ndata.clear()
        self.g.ndata["z"] = x @ self.weight
        return x
""", ('self.g.ndata["h"] = x @ self.weight', 'self.g.edata["e"] = x @ self.weight',
      'self.g.ndata["z"] = x @ self.weight')),
        # A module whose base lives in another file (it builds nn layers on self), storing from a
        # method its forward calls.
        Invalid("""
import torch.nn as nn
from recsys.base import Recommender
class Ranker(Recommender):
    def __init__(self, items, dim):
        super().__init__()
        self.item_emb = nn.Embedding(items, dim)
    def _lookup(self, items):
        self.item_vectors = self.item_emb(items)
        return self.item_vectors
    def forward(self, items):
        return self._lookup(items).sum(-1)
""", ("self.item_vectors = self.item_emb(items)",)),
        # __init__ builds the teacher by a call nothing here can read: its name says it is a model.
        Invalid("""
import torch.nn as nn
class Distilled(nn.Module):
    def __init__(self, config, build):
        super().__init__()
        self.student = nn.Linear(8, 1)
        self.teacher_network = build(config["teacher"])
    def forward(self, x):
        if self.training:
            self.teacher_pred = self.teacher_network(x)
        return self.student(x)
""", ("self.teacher_pred = self.teacher_network(x)",)),
        Invalid("""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(8, 8)
        self.register_buffer("running", torch.zeros(8))
    def forward(self, x):
        x = checkpoint(self.inner, x, use_reentrant=False)
        self.running = 0.9 * self.running + 0.1 * x.mean(0)
        return x
""", ("self.running = 0.9",)),
        Invalid("""
import torch
import torch.nn as nn
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.activations = []
        self.ema = torch.zeros(8)
    def forward(self, x):
        h = self.mlp(x)
        self.activations.append(h)
        self.ema = 0.99 * self.ema + 0.01 * h.mean(0)
        self.cache = h
        return h
""", ("self.activations.append(h)", "self.ema = 0.99", "self.cache = h")),
        Invalid("""
from torch.nn import Module, GRUCell
class Rnn(Module):
    def __init__(self):
        super().__init__()
        self.cell = GRUCell(4, 4)
        self.weight = torch.nn.Parameter(torch.ones(4))
    def forward(self, x):
        self.hidden = self.cell(x, self.hidden)
        self.scaled = x * self.weight
        return self.hidden
""", ("self.hidden = self.cell", "self.scaled = x * self.weight")),
        Invalid("""
import torch
import torch.nn as nn
import torch.nn.functional as F
class VectorQuantizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(8, 4)
        self.codebook = nn.Embedding(32, 4)
    def quantize(self, z):
        codes = torch.cdist(z, self.codebook.weight).argmin(dim=1)
        zq = self.codebook(codes)
        return zq, F.mse_loss(z, zq.detach())
    def forward(self, x):
        zq, commitment = self.quantize(self.encoder(x))
        self.commitment = commitment
        return zq
""", ("self.commitment = commitment",)),
        Invalid("""
import torch
import torch.nn as nn
class Prototypes(nn.Module):
    def __init__(self, classes, dim):
        super().__init__()
        self.encoder = nn.Linear(dim, dim)
        self.register_buffer("protos", torch.zeros(classes, dim))
    def forward(self, x, label):
        f = self.encoder(x)
        self.protos[label] = 0.9 * self.protos[label] + 0.1 * f.mean(0)
        return f
""", ("self.protos[label] = 0.9",)),
    )

    def precheck(self, tree) -> bool:
        return prechecks.stores_on_self_in(tree, "forward")

    def check(self, model: FileModel) -> Iterator[Hit]:
        for kept in graph_kept_by_module_forward(model):
            if kept.rests_on is not None:  # decided by another file of the project: say by what
                what = ("keeps every forward's graph" if kept.where == SELF_CONTAINER else
                        "chains each step's graph onto the last" if kept.chained else
                        "keeps a step's graph until the next")
                shown = f"global {kept.shown}" if kept.where == GLOBAL else kept.shown
                message = f"{shown} {what}: {kept.rests_on}; store .detach()"
                if len(message) > 120:  # a long path to the other file: the severity says it is one step
                    message = message.replace(" until the next:", ":", 1)
                yield Hit(kept.node, message,
                          Severity.WARNING if kept.where != SELF_CONTAINER and not kept.chained else Severity.ERROR,
                          kept.holder)
                continue
            if kept.where == SELF_ATTRIBUTE and kept.chained:
                yield Hit(kept.node, (
                    f"{kept.shown} chains each step's graph onto the last: memory grows every step; "
                    "update it under torch.no_grad()"), Severity.ERROR, kept.holder)
            elif kept.where == SELF_ATTRIBUTE:
                yield Hit(kept.node, (
                    f"{kept.shown} keeps this step's graph until the next; store .detach() or "
                    ".item() unless backward needs it"), Severity.WARNING, kept.holder)
            elif kept.where == GLOBAL:
                what = ("chains each step's graph onto the last: memory grows every step" if kept.chained
                        else "keeps this step's graph until the next")
                yield Hit(kept.node, f"global {kept.shown} {what}; store .detach() or .item()",
                          Severity.ERROR if kept.chained else Severity.WARNING, kept.holder)
            else:
                yield Hit(kept.node, (
                    f"{kept.shown} keeps a graph-attached tensor from every forward, never freed; "
                    "store .detach() or .item()"), Severity.ERROR, kept.holder)
