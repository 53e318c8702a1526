"""A LightningModule that logs its loss with self.log (Lightning keeps a detached copy) and keeps
per-step losses for the epoch as floats; probed with the LeakProbe callback."""

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gradlint.integrations.lightning import LeakProbe

import _report


class LitRegressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        self.step_losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        self.step_losses.append(loss.item())
        return loss

    def on_train_epoch_end(self):
        self.step_losses.clear()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1))
    probe = LeakProbe(steps=40, stop_when_done=True)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", callbacks=[probe], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(LitRegressor(), DataLoader(data, batch_size=16))
    _report.save(probe.report)
