"""Self-supervised projection heads for the point-cloud pretraining runs."""
import torch
from torch import nn
import torch.nn.functional as F


class MemoryBankEncoder(nn.Module):
    def __init__(self, in_dim, dim=256, proj_dim=128, bank_batches=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.proj = nn.Linear(dim, proj_dim)
        self.bank = []
        self.bank_batches = bank_batches

    def forward(self, x):
        z = F.normalize(self.proj(self.encoder(x)), dim=-1)
        self.bank.append(z)
        if len(self.bank) > self.bank_batches:
            self.bank.pop(0)
        negatives = torch.cat(self.bank[:-1]) if len(self.bank) > 1 else z.new_zeros(0, z.size(1))
        return z, negatives


class MoCoHead(nn.Module):
    def __init__(self, in_dim, dim=128, queue_size=65536, momentum=0.999):
        super().__init__()
        self.encoder_q = nn.Linear(in_dim, dim)
        self.encoder_k = nn.Linear(in_dim, dim)
        self.encoder_k.load_state_dict(self.encoder_q.state_dict())
        self.register_buffer("queue", F.normalize(torch.randn(dim, queue_size), dim=0))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.momentum = momentum

    @torch.no_grad()
    def _momentum_update(self):
        for pq, pk in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            pk.mul_(self.momentum).add_(pq, alpha=1.0 - self.momentum)

    def forward(self, xq, xk, temperature=0.07):
        q = F.normalize(self.encoder_q(xq), dim=-1)
        with torch.no_grad():
            self._momentum_update()
            k = F.normalize(self.encoder_k(xk), dim=-1)
        l_pos = (q * k).sum(-1, keepdim=True)
        l_neg = q @ self.queue.clone()
        logits = torch.cat([l_pos, l_neg], dim=1) / temperature
        with torch.no_grad():
            n = k.size(0)
            p = int(self.ptr)
            self.queue[:, p:p + n] = k.T
            self.ptr.fill_((p + n) % self.queue.size(1))
        return logits


class DINOHead(nn.Module):
    def __init__(self, in_dim, out_dim=4096, teacher_temp=0.04, center_momentum=0.9):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_dim, 2048), nn.GELU(), nn.Linear(2048, out_dim))
        self.register_buffer("center", torch.zeros(1, out_dim))
        self.teacher_temp = teacher_temp
        self.m = center_momentum

    def forward(self, x):
        z = self.mlp(x)
        probs = F.softmax((z - self.center) / self.teacher_temp, dim=-1)
        self.center = self.m * self.center + (1 - self.m) * z.mean(0, keepdim=True)
        return probs


class CenteredDINOHead(DINOHead):
    def forward(self, x):
        z = self.mlp(x)
        probs = F.softmax((z - self.center) / self.teacher_temp, dim=-1)
        with torch.no_grad():
            self.center = self.m * self.center + (1 - self.m) * z.mean(0, keepdim=True)
        return probs
