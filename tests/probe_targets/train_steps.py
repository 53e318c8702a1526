"""User-style training steps for the probe's tests: one set-up at import, one step per function."""

import collections

import torch
from torch import nn

from gradlint.cuda_ext import scatter_add

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
index = torch.randint(0, 8, (32,), dtype=torch.int32)
losses = []
total_loss = 0.0
NOT_A_STEP = 3


class ScatterMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, dim_size):
        out = scatter_add(src.detach(), index, dim_size)
        ctx.out = out
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.index_select(0, index), None, None


class ScatterRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, dim_size):
        out = scatter_add(src.detach(), index, dim_size)
        ctx.rows = out[1:]
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.index_select(0, index), None, None


def _loss(pool=None):
    h = model(torch.randn(32, 16))
    if pool is not None:
        h = pool.apply(h, index, 8)
    return h.pow(2).mean()


def clean_step():
    optimizer.zero_grad()
    loss = _loss()
    loss.backward()
    optimizer.step()


def keep_losses():
    optimizer.zero_grad()
    loss = _loss()
    loss.backward()
    optimizer.step()
    losses.append(loss)


def accumulate_loss():
    global total_loss
    optimizer.zero_grad()
    loss = _loss()
    loss.backward()
    optimizer.step()
    total_loss += loss


def output_on_ctx():
    optimizer.zero_grad()
    loss = _loss(ScatterMean)
    loss.backward()
    optimizer.step()


def view_on_ctx():
    optimizer.zero_grad()
    loss = _loss(ScatterRows)
    loss.backward()
    optimizer.step()


def raising_step():
    global calls
    calls = globals().get("calls", 0) + 1
    if calls == 7:
        raise ValueError("batch 7 is empty")
    clean_step()


side_scores = []


def keep_an_unused_branch():
    # backward runs through the loss only: the exp node of the side branch keeps its saved
    # output (32 x 4 float32 = 512 B) inside C++, reachable from the kept score alone.
    optimizer.zero_grad()
    h = model(torch.randn(32, 16))
    side_scores.append(h.exp().sum())
    loss = h.pow(2).mean()
    loss.backward()
    optimizer.step()


replay = collections.deque(maxlen=30)


def replay_buffer():
    # A bounded buffer: it fills by step 30, then each new batch pushes the oldest out.
    x = torch.randn(32, 16)
    replay.append(x)
    clean_step()


rnn = nn.LSTM(input_size=8, hidden_size=16, batch_first=True)
hidden_state = None


def carry_hidden():
    # The state is carried into the next step without .detach(): every step's LSTM node and the
    # tensors it saved stay reachable from it (backward keeps the graph so it can run again).
    global hidden_state
    out, hidden_state = rnn(torch.randn(4, 5, 8), hidden_state)
    out[:, -1].pow(2).mean().backward(retain_graph=True)


detached_outputs = []


def keep_detached():
    # Kept without their graph: the tensors grow, the graph does not.
    optimizer.zero_grad()
    h = model(torch.randn(32, 16))
    h.pow(2).mean().backward()
    optimizer.step()
    detached_outputs.append(h.detach())


def generator_step():
    """Calling it makes a generator and runs nothing."""
    yield clean_step()
