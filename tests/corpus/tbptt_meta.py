"""Sequence models over point trajectories: TBPTT, first-order meta-learning, saliency."""
import torch
import torch.nn.functional as F
from torch.func import functional_call


def _forward_with(model, fast, x):
    names = [name for name, _ in model.named_parameters()]
    return functional_call(model, dict(zip(names, fast)), (x,))


def train_tbptt(rnn, head, optimizer, sequence, targets, chunk=32):
    hidden = None
    total = 0.0
    for start in range(0, sequence.size(1), chunk):
        x = sequence[:, start:start + chunk]
        y = targets[:, start:start + chunk]
        out, hidden = rnn(x, hidden)
        loss = F.mse_loss(head(out), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward(retain_graph=True)
        optimizer.step()
        total += loss.item()
    return total


def train_tbptt_detached(rnn, head, optimizer, sequence, targets, chunk=32):
    hidden = None
    total = 0.0
    for start in range(0, sequence.size(1), chunk):
        x = sequence[:, start:start + chunk]
        out, hidden = rnn(x, hidden)
        hidden = tuple(h.detach() for h in hidden)
        loss = F.mse_loss(head(out), targets[:, start:start + chunk])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total


def inner_adapt(model, params, support_x, support_y, inner_lr=0.01, steps=3):
    fast = list(params)
    for _ in range(steps):
        loss = F.cross_entropy(_forward_with(model, fast, support_x), support_y)
        grads = torch.autograd.grad(loss, fast, retain_graph=True)
        fast = [p - inner_lr * g for p, g in zip(fast, grads)]
    return fast


def meta_step(model, meta_opt, task, inner_lr=0.01):
    params = list(model.parameters())
    loss_s = F.cross_entropy(model(task.support_x), task.support_y)
    grads = torch.autograd.grad(loss_s, params, retain_graph=True)
    fast = [p - inner_lr * g for p, g in zip(params, grads)]
    loss_q = F.cross_entropy(_forward_with(model, fast, task.query_x), task.query_y)
    meta_opt.zero_grad(set_to_none=True)
    loss_q.backward()
    meta_opt.step()
    return loss_q.item()


def input_saliency(model, x):
    x = x.detach().requires_grad_(True)
    logits = model(x)
    grad, = torch.autograd.grad(logits.max(dim=1).values.sum(), x, retain_graph=True)
    return grad.abs().amax(dim=-1), logits.detach()


def per_class_saliency(model, x, num_classes):
    x = x.detach().requires_grad_(True)
    logits = model(x)
    maps = []
    for c in range(num_classes):
        x.grad = None
        logits[:, c].sum().backward(retain_graph=True)
        maps.append(x.grad.detach().abs().amax(dim=-1))
    return torch.stack(maps, dim=1)


def train_until(model, optimizer, stream, max_loss=0.05, max_iters=10_000):
    it = 0
    loss_val = float("inf")
    while loss_val > max_loss and it < max_iters:
        x, y = next(stream)
        try:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward(retain_graph=True)
            optimizer.step()
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            continue
        loss_val = loss.item()
        it += 1
    return it


def train_stateful(model, loader, optimizer, criterion):
    # the classic TBPTT mistake: the hidden state is never detached, so retain_graph "fixes" the
    # second-backward error and every step keeps the previous graph alive
    hidden = None
    for x, y in loader:
        optimizer.zero_grad()
        out, hidden = model(x, hidden)
        loss = criterion(out, y)
        loss.backward(retain_graph=True)
        optimizer.step()
