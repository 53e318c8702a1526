"""Steps whose memory sits inside autograd nodes, where no Python object refers to it: a custom
Function that saves a view of its own output in an evaluation pass that never runs backward, and
a scatter-mean layer whose int64 index is saved until backward. One set-up at import, one step
per function."""

import torch
from torch import nn

torch.manual_seed(0)


class ScatterMean(torch.autograd.Function):
    """Mean of the rows of `src` that share an index; keeps a slice of its output for backward."""

    @staticmethod
    def forward(ctx, src, index, groups):
        out = torch.zeros(groups, src.size(1)).index_add_(0, index, src)
        counts = torch.bincount(index, minlength=groups).clamp_(min=1).unsqueeze(1)
        out = out / counts
        ctx.save_for_backward(index, counts, out[:, :1])
        return out

    @staticmethod
    def backward(ctx, grad):
        index, counts, _first = ctx.saved_tensors
        return (grad / counts).index_select(0, index), None, None


class GatherRows(torch.autograd.Function):
    """Rows of `src` picked by an int64 index, which backward needs to scatter the gradient back."""

    @staticmethod
    def forward(ctx, src, index):
        ctx.save_for_backward(index)
        ctx.rows = src.size(0)
        return src.index_select(0, index)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return torch.zeros(ctx.rows, grad.size(1)).index_add_(0, index, grad), None


class SortedRows(torch.autograd.Function):
    """Rows of `src` in the order of `score`; the order (an argsort, so int64) is kept for backward."""

    @staticmethod
    def forward(ctx, src, score):
        order = torch.argsort(score)
        ctx.save_for_backward(order)
        return src.index_select(0, order)

    @staticmethod
    def backward(ctx, grad):
        (order,) = ctx.saved_tensors
        return torch.empty_like(grad).index_copy_(0, order, grad), None


encoder = nn.Linear(16, 16)
points = torch.randn(512, 16)
labels = torch.randint(0, 32, (512,))
validation_scores = []


def evaluate_under_grad():
    # An evaluation pass left under grad mode: backward never runs on the graph, and the slice of
    # ScatterMean's output its node saved keeps the output (and the node) alive.
    pooled = ScatterMean.apply(encoder(points), labels, 32)
    validation_scores.append(pooled.detach().mean().item())


def train_with_saved_index():
    index = torch.randint(0, 512, (131072,))  # 1 MiB of int64 saved until backward
    picked = GatherRows.apply(encoder(points), index)
    picked.pow(2).mean().backward()
    encoder.zero_grad(set_to_none=True)


def train_with_int32_index():
    index = torch.randint(0, 512, (131072,), dtype=torch.int32)  # the same index as int32
    picked = GatherRows.apply(encoder(points), index)
    picked.pow(2).mean().backward()
    encoder.zero_grad(set_to_none=True)


def train_with_sorted_rows():
    score = torch.randn(131072)  # its argsort is 1 MiB of int64, saved until backward
    rows = encoder(torch.randn(131072, 16))
    SortedRows.apply(rows, score).pow(2).mean().backward()
    encoder.zero_grad(set_to_none=True)


optimizer = torch.optim.SGD(encoder.parameters(), lr=0.01)


def train_clearing_the_cache():
    encoder(torch.randn(64, 16)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    torch.cuda.empty_cache()  # every step (GL106): frees nothing still referenced; a no-op on a CPU build
