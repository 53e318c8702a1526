"""A small Lightning-style module for point-cloud classification."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class LitClassifier(nn.Module):
    def __init__(self, backbone: nn.Module, num_classes: int, lr: float = 1e-3):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(backbone.out_dim, num_classes)
        self.lr = lr
        self.training_step_outputs = []
        self.validation_step_outputs = []
        self.logged = {}

    def log(self, name, value):
        self.logged[name] = float(value)

    def forward(self, x):
        return self.head(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
        self.log("train/loss", loss)
        self.training_step_outputs.append({"loss": loss, "preds": logits.argmax(-1)})
        return loss

    def on_train_epoch_end(self):
        losses = torch.stack([o["loss"] for o in self.training_step_outputs])
        self.log("train/epoch_loss", losses.mean())
        self.training_step_outputs.clear()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        with torch.no_grad():
            logits = self(x)
        self.validation_step_outputs.append((logits, y))
        return F.cross_entropy(logits, y)

    def on_validation_epoch_end(self):
        logits = torch.cat([l for l, _ in self.validation_step_outputs])
        y = torch.cat([t for _, t in self.validation_step_outputs])
        self.log("val/acc", (logits.argmax(-1) == y).float().mean())
        self.validation_step_outputs.clear()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.05)


def fit(module: LitClassifier, train_loader, val_loader, epochs: int):
    opt = module.configure_optimizers()
    for epoch in range(epochs):
        module.train()
        for i, batch in enumerate(train_loader):
            opt.zero_grad()
            loss = module.training_step(batch, i)
            loss.backward()
            opt.step()
        module.on_train_epoch_end()
        module.eval()
        for i, batch in enumerate(val_loader):
            module.validation_step(batch, i)
        module.on_validation_epoch_end()
