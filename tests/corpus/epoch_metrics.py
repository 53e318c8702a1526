"""Classification and regression trainers that accumulate metrics over an epoch."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class AverageMeter:
    def __init__(self, name):
        self.name = name
        self.reset()

    def reset(self):
        self.sum = 0.0
        self.count = 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


class RunningAccuracy(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("correct", torch.zeros((), dtype=torch.long))
        self.register_buffer("total", torch.zeros((), dtype=torch.long))

    def forward(self, logits, target):
        self.correct += (logits.argmax(-1) == target).sum()
        self.total += target.numel()
        return self.correct.float() / self.total

    def reset(self):
        self.correct.zero_()
        self.total.zero_()


def train_classifier(model, loader, opt, num_classes=10):
    model.train()
    loss_meter = AverageMeter("loss")
    acc = RunningAccuracy()
    preds_all, targets_all, probs_all = [], [], []
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.long)
    for x, y in loader:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_meter.update(loss.item(), x.size(0))
        acc(logits, y)
        preds = logits.argmax(1)
        preds_all.append(preds)
        targets_all.append(y)
        probs_all.append(logits.softmax(-1))
        confusion += torch.bincount(y * num_classes + preds, minlength=num_classes ** 2).view(num_classes, num_classes)
    preds_all = torch.cat(preds_all)
    targets_all = torch.cat(targets_all)
    return loss_meter.avg, acc.correct.item() / acc.total.item(), confusion, torch.cat(probs_all)


def train_regression(model, loader, opt):
    model.train()
    sum_abs_err = torch.zeros(())
    sum_sq = 0.0
    n = 0
    loss_bank = torch.zeros(len(loader.dataset))
    for x, y, idx in loader:
        pred = model(x).squeeze(-1)
        per_sample = F.smooth_l1_loss(pred, y, reduction="none")
        loss = per_sample.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sum_abs_err += (pred - y).abs().sum()
        sum_sq += ((pred.detach() - y) ** 2).sum()
        loss_bank[idx] = per_sample
        n += y.numel()
    mae = sum_abs_err.item() / n
    rmse = (sum_sq / n) ** 0.5
    return mae, float(rmse), loss_bank


@torch.inference_mode()
def evaluate(model, loader):
    model.eval()
    probs, labels = [], []
    total_loss = 0.0
    for x, y in loader:
        logits = model(x)
        total_loss += F.cross_entropy(logits, y, reduction="sum")
        probs.append(logits.softmax(-1).cpu())
        labels.append(y)
    probs = torch.cat(probs)
    labels = torch.cat(labels)
    return total_loss.item() / len(labels), (probs.argmax(1) == labels).float().mean().item()


def fit(model, train_loader, val_loader, epochs=30, lr=1e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    history = []
    for epoch in range(epochs):
        tr_loss, tr_acc, conf, _ = train_classifier(model, train_loader, opt)
        va_loss, va_acc = evaluate(model, val_loader)
        history.append({"epoch": epoch, "train_loss": tr_loss, "train_acc": tr_acc, "val_loss": va_loss, "val_acc": va_acc})
        per_class = conf.diag().float() / conf.sum(1).clamp(min=1)
        print(f"epoch {epoch} train {tr_loss:.3f}/{tr_acc:.3f} val {va_loss:.3f}/{va_acc:.3f} worst {per_class.min():.3f}")
    return history
