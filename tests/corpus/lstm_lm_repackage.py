"""Same LM loop, with the hidden state repackaged between BPTT windows."""
import math
import time

import torch
import torch.nn as nn


def repackage_hidden(h):
    """Wrap hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def train_epoch(model, train_data, optimizer, criterion, ntokens, bptt=35, log_interval=200):
    model.train()
    total_loss = 0.0
    start = time.time()
    hidden = model.init_hidden(train_data.size(1))
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        data = train_data[i : i + bptt]
        targets = train_data[i + 1 : i + 1 + bptt].reshape(-1)
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, ntokens), targets)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        total_loss += loss.item()
        if batch % log_interval == 0 and batch > 0:
            cur = total_loss / log_interval
            print(f"| {batch:5d} batches | ms/batch {(time.time() - start) * 1000 / log_interval:5.2f} | ppl {math.exp(cur):8.2f}")
            total_loss = 0.0
            start = time.time()


@torch.no_grad()
def evaluate(model, data_source, criterion, ntokens, bptt=35):
    model.eval()
    total = 0.0
    hidden = model.init_hidden(data_source.size(1))
    for i in range(0, data_source.size(0) - 1, bptt):
        data = data_source[i : i + bptt]
        targets = data_source[i + 1 : i + 1 + bptt].reshape(-1)
        output, hidden = model(data, hidden)
        total += len(data) * criterion(output.view(-1, ntokens), targets).item()
    return total / (len(data_source) - 1)
