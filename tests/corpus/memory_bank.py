"""Instance discrimination with a memory bank, and cross-batch memory (XBM) for metric learning."""
from collections import deque

import torch
import torch.nn as nn
import torch.nn.functional as F


class LinearAverage(nn.Module):
    """Non-parametric softmax over a bank of per-instance features (momentum-updated)."""

    def __init__(self, dim, n_data, T=0.07, momentum=0.5):
        super().__init__()
        self.T = T
        self.momentum = momentum
        self.register_buffer("memory", F.normalize(torch.randn(n_data, dim), dim=1))

    def forward(self, x, y):
        out = x @ self.memory.t() / self.T
        with torch.no_grad():
            pos = self.memory.index_select(0, y)
            pos.mul_(self.momentum).add_(x.detach() * (1 - self.momentum))
            self.memory.index_copy_(0, y, F.normalize(pos, dim=1))
        return out


class ProjectionBank(nn.Module):
    """Same idea with a learned projection; the bank is written in forward."""

    def __init__(self, in_dim, dim, n_data, T=0.1):
        super().__init__()
        self.proj = nn.Linear(in_dim, dim)
        self.T = T
        self.register_buffer("bank", F.normalize(torch.randn(n_data, dim), dim=1))

    def forward(self, feats, idx):
        z = F.normalize(self.proj(feats), dim=1)
        logits = z @ self.bank.t() / self.T
        self.bank[idx] = z
        return logits


def contrastive_loss(emb, labels, ref_emb, ref_labels, margin=0.5):
    sim = emb @ ref_emb.t()
    pos_mask = labels[:, None] == ref_labels[None, :]
    neg_mask = ~pos_mask
    pos_loss = ((1 - sim) * pos_mask).sum() / pos_mask.sum().clamp(min=1)
    neg_loss = (F.relu(sim - margin) * neg_mask).sum() / neg_mask.sum().clamp(min=1)
    return pos_loss + neg_loss


def train_xbm(model, loader, opt, epochs, memory_batches=64, start_iter=1000):
    feats_mem = deque(maxlen=memory_batches)
    labels_mem = deque(maxlen=memory_batches)
    it = 0
    log = []
    for epoch in range(epochs):
        for x, y in loader:
            emb = F.normalize(model(x), dim=1)
            loss = contrastive_loss(emb, y, emb, y)
            if it > start_iter and len(feats_mem) > 0:
                mem_emb = torch.cat(list(feats_mem))
                mem_y = torch.cat(list(labels_mem))
                loss = loss + contrastive_loss(emb, y, mem_emb, mem_y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            feats_mem.append(emb)
            labels_mem.append(y)
            it += 1
            if it % 50 == 0:
                log.append(loss.item())
    return log


def train_instance_disc(backbone, lemniscate, loader, opt, epochs):
    crit = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        total = 0.0
        for x, _, index in loader:
            feat = F.normalize(backbone(x), dim=1)
            out = lemniscate(feat, index)
            loss = crit(out, index)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / len(loader):.4f}")
