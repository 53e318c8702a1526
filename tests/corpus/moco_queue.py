"""MoCo-v2 style contrastive head with a feature queue."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MoCoHead(nn.Module):
    def __init__(self, encoder_q: nn.Module, encoder_k: nn.Module, dim=128, K=4096, m=0.999, T=0.07):
        super().__init__()
        self.encoder_q, self.encoder_k = encoder_q, encoder_k
        self.K, self.m, self.T = K, m, T
        for p in self.encoder_k.parameters():
            p.requires_grad_(False)
        self.register_buffer("queue", F.normalize(torch.randn(dim, K), dim=0))

    @torch.no_grad()
    def _momentum_update(self):
        for pq, pk in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            pk.data.mul_(self.m).add_(pq.data, alpha=1 - self.m)

    def forward(self, im_q, im_k):
        q = F.normalize(self.encoder_q(im_q), dim=1)
        self._momentum_update()
        # key branch: shuffled-BN trick omitted on a single GPU
        k = F.normalize(self.encoder_q(im_k), dim=1)
        l_pos = (q * k).sum(dim=1, keepdim=True)
        l_neg = q @ self.queue
        logits = torch.cat([l_pos, l_neg], dim=1) / self.T
        labels = torch.zeros(logits.size(0), dtype=torch.long, device=logits.device)
        self.queue = torch.cat([k.t(), self.queue], dim=1)[:, : self.K]
        return F.cross_entropy(logits, labels)
