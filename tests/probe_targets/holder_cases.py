"""Training steps whose leaks sit where the holder walk needs more than one plain attribute: two
leaking attributes of one object, a class attribute, a closure's variable, a suspended
generator's local, an lru_cache, an optimizer's parameter groups. One set-up at import, one step
per function; each leak has its own size so a test can tell the holders' bytes apart."""

import functools

import torch
from torch import nn

torch.manual_seed(0)


class TwoOutputs(torch.autograd.Function):
    """Both outputs kept on ctx: a cycle gc.collect() does not free (two outputs, not one)."""

    @staticmethod
    def forward(ctx, x):
        lse = torch.logsumexp(x, dim=1)
        probs = torch.exp(x - lse.unsqueeze(1))
        ctx.probs = probs
        ctx.lse = lse
        return probs, lse

    @staticmethod
    def backward(ctx, g_probs, g_lse):
        p = ctx.probs
        return p * (g_probs - (g_probs * p).sum(1, keepdim=True)) + g_lse.unsqueeze(1) * p


class Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.inputs_seen = []
        self.feats = []

    def forward(self, x):
        self.inputs_seen.append(x)
        h = self.fc(x)
        self.feats.append(h.detach())
        return h


class Log:
    def __init__(self):
        self.inputs = []
        self.outputs = []


class Block(nn.Module):
    debug_outputs = []  # noqa: RUF012 - the leak under test: one list shared by every instance

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        out = x + torch.relu(self.fc(x))
        self.debug_outputs.append(out.detach())
        return out


def make_logger():
    buffer = []

    def log(t):
        buffer.append(t)
        return len(buffer)

    return log


def train_loop():
    history = []
    while True:
        x = torch.randn(4, 8)
        history.append(x * 2)
        yield len(history)


@functools.lru_cache(maxsize=None)  # noqa: UP033 - spelled out: the report names the maxsize
def augment(x):
    return x + 0.01 * torch.randn_like(x)


class Prototypes(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(8, 4)
        self.register_buffer("protos", torch.zeros(3, 4))

    def forward(self, x, label):
        f = self.encoder(x)
        self.protos[label] = f.mean(0)  # outside no_grad: the buffer's grad_fn chains every write
        return f


class Adapters(nn.Module):
    def __init__(self):
        super().__init__()
        self.extra = nn.ParameterList()
        self.blocks = nn.ModuleList()


def remember(x, seen=[], *, by_shape={}):  # noqa: B006 - the leak under test
    seen.append(x)
    by_shape[len(seen)] = x * 2
    return x


lin = nn.Linear(8, 16)
adapters = Adapters()
calls = [0]
prototypes = Prototypes()
recorder = Recorder()
log = Log()
vars(log)  # what copy, pickle or a debugger do: the instance's attributes now live in a dict
block = Block()
log_tensor = make_logger()
trainer = train_loop()
backbone = nn.Linear(8, 4)
prompt_opt = torch.optim.Adam(backbone.parameters(), lr=1e-3)


def ctx_two_outputs():
    probs, lse = TwoOutputs.apply(lin(torch.randn(4, 8)))  # probs 256 B, lse 16 B
    (probs.sum() + lse.sum()).backward()


def module_two_lists():
    with torch.no_grad():
        recorder(torch.randn(4, 8))  # inputs_seen 128 B, feats 256 B


def object_two_lists():
    x = torch.randn(64)  # 256 B
    log.inputs.append(x)
    log.outputs.append(x.sum().reshape(1).repeat(4))  # 16 B


def class_attribute_list():
    block(torch.randn(4, 8))  # 128 B


def closure_list():
    log_tensor(torch.randn(16))  # 64 B


def generator_local():
    next(trainer)  # 128 B


def lru_cached():
    augment(torch.randn(4, 8))  # the argument and the result: 128 B each


def param_group_each_step():
    prompt = torch.randn(2, 8, requires_grad=True)  # 64 B
    prompt_opt.add_param_group({"params": [prompt]})
    loss = backbone(torch.cat([prompt, torch.randn(4, 8)])).pow(2).mean()
    prompt_opt.zero_grad()
    loss.backward()
    prompt_opt.step()  # the new parameter's exp_avg and exp_avg_sq (64 B each) and step (4 B)


def default_arguments():
    remember(torch.randn(16))  # kept by `seen` (64 B) and its double by `by_shape` (64 B)


def buffer_written_in_place():
    prototypes(torch.randn(4, 8), 1).pow(2).mean().backward()


def parameter_list_from_call_30():
    calls[0] += 1
    if calls[0] >= 30:  # nn.Parameter makes a new tensor object on the zeros' storage: no op returns it
        adapters.extra.append(nn.Parameter(torch.zeros(64)))  # 256 B


def module_list_grows():
    adapters.blocks.append(nn.Linear(4, 4))  # weight 64 B + bias 16 B


pair_kept, pair_count = [], [0]


def tuple_bound_global():
    pair_count[0] += 1
    pair_kept.append(torch.randn(16))  # 64 B


def record_a(t):
    record_a.outputs.append(t)


def record_b(t):
    record_b.outputs.append(t)


record_a.outputs = []
record_b.outputs = []


def function_attributes():
    record_a(torch.randn(16))  # 64 B
    record_b(torch.randn(32))  # 128 B


class NamedAtRunTime(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x * 2.0
        setattr(ctx, "cached_" + "head", out[:2])  # a view of the output: never freed
        return out

    @staticmethod
    def backward(ctx, g):
        return g * 2.0


run_time_weight = torch.randn(8, 8, requires_grad=True)


def ctx_attribute_named_at_run_time():
    NamedAtRunTime.apply(run_time_weight * 1.0).sum().backward()


def ctx_view_of_a_leaf_made_in_the_step():
    NamedAtRunTime.apply(torch.randn(8, 8, requires_grad=True)).sum().backward()
