"""Point-cloud classifier whose modules keep their latest outputs for logging and probing."""
import torch
import torch.nn.functional as F
from torch import nn


class PointHead(nn.Module):
    def __init__(self, dim=64, classes=40):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.cls = nn.Linear(dim, classes)

    def forward(self, pts):
        feats = self.mlp(pts).max(dim=1).values
        self.last_feats = feats.detach()
        logits = self.cls(feats)
        self.last_logits = logits
        return logits


class Tapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 16)

    def forward(self, pts):
        out = self.proj(pts)
        with torch.no_grad():
            self.tap = out.norm(dim=-1)
        return out


head = PointHead()
probe = Tapped()
opt = torch.optim.Adam(head.parameters(), lr=1e-3)
logit_history = []
feature_bank = []
tap_history = []


def train(loader):
    for pts, y in loader:
        loss = F.cross_entropy(head(pts), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        logit_history.append(head.last_logits)
        feature_bank.append(head.last_feats)
        probe(pts)
        tap_history.append(probe.tap)


def evaluate(loader):
    global running
    running = 0
    for pts, y in loader:
        running = running + head(pts).softmax(-1).max(-1).values.sum()
    return running


def evaluate_quietly(loader):
    total = 0.0
    with torch.no_grad():
        for pts, y in loader:
            total += head(pts).argmax(-1).eq(y).sum().item()
    return total
