"""The shared set-up of the bundled scenarios: a point cloud, its k-NN graph, a small trainer.

Each scenario supplies only the part whose memory behaviour it demonstrates (its aggregation
Function, its module, its step); the rest is here, written cleanly.
"""

from __future__ import annotations

import torch
from torch import nn

from gradlint.cuda_ext import scatter_add

POINTS = 128
NEIGHBOURS = 8
CHANNELS = 16


def point_cloud(device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    points = torch.rand(POINTS, 3, generator=generator).to(device)
    features = torch.randn(POINTS, CHANNELS, generator=generator).to(device)
    return points, features


def knn_edges(points: torch.Tensor, k: int = NEIGHBOURS, dtype: torch.dtype = torch.int32) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, target) of each point's k nearest neighbours, computed once at set-up."""
    with torch.no_grad():
        nearest = torch.cdist(points, points).topk(k, largest=False).indices
    target = torch.arange(points.shape[0], device=points.device).repeat_interleave(k)
    return nearest.reshape(-1).to(dtype), target.to(dtype)


def scatter_sum(messages: torch.Tensor, target: torch.Tensor, dim_size: int) -> torch.Tensor:
    return scatter_add(messages, target, dim_size)


class MessagePassing(nn.Module):
    """h_i' = relu(W [h_i, sum_{j in knn(i)} msg(h_j)]) with a pluggable aggregation."""

    def __init__(self, aggregate=scatter_sum) -> None:
        super().__init__()
        self.message = nn.Linear(CHANNELS, CHANNELS)
        self.update = nn.Linear(2 * CHANNELS, CHANNELS)
        self.aggregate = aggregate

    def forward(self, h: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        messages = self.message(h.index_select(0, source))
        pooled = self.aggregate(messages, target, h.shape[0])
        return torch.relu(self.update(torch.cat([h, pooled], dim=1)))


class Trainer:
    """One optimizer step per call on noisy copies of the same cloud."""

    def __init__(self, model: nn.Module, device: str, index_dtype: torch.dtype = torch.int32) -> None:
        self.device = device
        self.points, self.features = point_cloud(device)
        self.source, self.target = knn_edges(self.points, dtype=index_dtype)
        self.model = model.to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def batch(self) -> torch.Tensor:
        return self.features + 0.01 * torch.randn_like(self.features)

    def loss(self) -> torch.Tensor:
        out = self.model(self.batch(), self.source, self.target)
        return out.pow(2).mean()

    def step(self) -> torch.Tensor:
        """Forward, backward, update; returns the loss (still attached to its graph)."""
        self.optimizer.zero_grad()
        loss = self.loss()
        loss.backward()
        self.optimizer.step()
        return loss
