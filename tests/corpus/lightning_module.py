"""LightningModule for ModelNet40 classification."""
import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn


class PointMLPBackbone(nn.Module):
    def __init__(self, widths=(64, 128, 1024)):
        super().__init__()
        layers, c = [], 3
        for w in widths:
            layers += [nn.Linear(c, w), nn.LayerNorm(w), nn.GELU()]
            c = w
        self.mlp = nn.Sequential(*layers)

    def forward(self, pts):
        return self.mlp(pts).max(dim=1).values


class PointCloudClassifier(pl.LightningModule):
    def __init__(self, num_classes=40, lr=1e-3, label_smoothing=0.2):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = PointMLPBackbone()
        self.head = nn.Linear(1024, num_classes)
        self.training_step_outputs = []
        self.validation_step_outputs = []
        self.test_outputs = []
        self.epoch_loss = 0.0
        self.seen_batches = 0

    def forward(self, pts):
        return self.head(self.backbone(pts))

    def training_step(self, batch, batch_idx):
        pts, labels = batch
        logits = self.head(self.backbone(pts))
        loss = F.cross_entropy(logits, labels, label_smoothing=self.hparams.label_smoothing)
        self.training_step_outputs.append(loss)
        self.epoch_loss += loss
        self.seen_batches += 1
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def on_train_epoch_end(self):
        mean = torch.stack(self.training_step_outputs).mean()
        self.log("train/epoch_loss", mean)
        self.training_step_outputs.clear()
        self.epoch_loss = 0.0

    def validation_step(self, batch, batch_idx):
        pts, labels = batch
        logits = self.head(self.backbone(pts))
        loss = F.cross_entropy(logits, labels)
        acc = (logits.argmax(-1) == labels).float().mean()
        self.validation_step_outputs.append(loss)
        self.log_dict({"val/loss": loss, "val/acc": acc}, prog_bar=True)

    def on_validation_epoch_end(self):
        if self.validation_step_outputs:
            self.log("val/epoch_loss", torch.stack(self.validation_step_outputs).mean())
        self.validation_step_outputs.clear()

    def test_step(self, batch, batch_idx):
        pts, labels = batch
        logits = self.head(self.backbone(pts))
        self.test_outputs.append(logits)
        return (logits.argmax(-1) == labels).float().mean()

    def predict_step(self, batch, batch_idx):
        pts, _ = batch
        return self.head(self.backbone(pts)).softmax(-1)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.05)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.trainer.max_epochs)
        return {"optimizer": opt, "lr_scheduler": sched}
