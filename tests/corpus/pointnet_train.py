"""Joint classification + part-segmentation training for PointNet++ (ShapeNetPart)."""
import copy
import math

import torch
import torch.nn.functional as F


class EMA:
    """Exponential moving average of the weights, evaluated instead of the raw model."""

    def __init__(self, model, decay=0.999):
        self.decay = decay
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model):
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                self.shadow[k] = self.decay * self.shadow[k] + (1.0 - self.decay) * v
            else:
                self.shadow[k] = v.clone()


@torch.no_grad()
def update_ema_model(ema_model, model, decay):
    for ema_p, p in zip(ema_model.parameters(), model.parameters()):
        ema_p.mul_(decay).add_(p, alpha=1.0 - decay)


def cosine_lr(step, total, base_lr, warmup=500):
    if step < warmup:
        return base_lr * step / warmup
    return 0.5 * base_lr * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def train_epochs(model, loader, optimizer, epochs, heads=("cls", "seg"), aux_weight=0.1):
    ema_model = copy.deepcopy(model).eval()
    ema = EMA(model)
    log = []
    step = 0
    for epoch in range(epochs):
        model.train()
        epoch_loss = 0.0
        for pts, cls_y, seg_y in loader:
            out = model(pts)
            loss = 0.0
            for h in heads:
                target = cls_y if h == "cls" else seg_y
                loss = loss + F.cross_entropy(out[h].flatten(0, -2), target.flatten())
            loss = loss + aux_weight * out["trans_reg"]
            for g in optimizer.param_groups:
                g["lr"] = cosine_lr(step, epochs * len(loader), 1e-3)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            update_ema_model(ema_model, model, 0.999)
            ema.update(model)
            epoch_loss += loss
            step += 1
        log.append(epoch_loss.item() / max(len(loader), 1))
        print(f"epoch {epoch}: loss {log[-1]:.4f}")
    return ema_model, log


def train_with_accumulation(model, loader, optimizer, accum_steps=4):
    running = 0.0
    model.train()
    optimizer.zero_grad()
    for i, (pts, labels) in enumerate(loader):
        logits = model(pts)
        loss = F.nll_loss(F.log_softmax(logits, dim=-1), labels) / accum_steps
        loss.backward()
        running += loss.item()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            print(f"step {(i + 1) // accum_steps}: {running:.4f}")
            running = 0.0


def grad_stats(model, loader, criterion, max_batches=10):
    norms = []
    for i, (pts, labels) in enumerate(loader):
        if i == max_batches:
            break
        model.zero_grad()
        criterion(model(pts), labels).backward()
        total = sum(p.grad.detach().pow(2).sum() for p in model.parameters() if p.grad is not None)
        norms.append(total.sqrt().item())
    return norms
