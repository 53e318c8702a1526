"""Tiny LightningModules, as users write them, for tests/test_integration_lightning.py (CPU, no downloads)."""

from __future__ import annotations

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def regression_loader(batches: int = 64, batch_size: int = 8) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batches * batch_size, 16, generator=generator)
    y = x @ torch.randn(16, 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


class Regressor(L.LightningModule):
    """Clean: logs the loss (Lightning keeps the latest value) and steps Adam (state made on step 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class LossHistoryRegressor(Regressor):
    """Leaks: keeps every step's loss with its graph to average at epoch end (should be loss.detach())."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs = []

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.outputs.append(loss)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("epoch_loss", torch.stack(self.outputs).mean())
        self.outputs.clear()


class ManualRegressor(Regressor):
    """Manual optimization: training_step steps the optimizer itself; clean."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return loss.detach()


class FailingRegressor(Regressor):
    """Raises on its 15th batch (a shape bug in a rare branch)."""

    def training_step(self, batch, batch_idx):
        if batch_idx == 14:
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x15 and 16x32)")
        return super().training_step(batch, batch_idx)
