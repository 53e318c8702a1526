"""Mixed-precision trainer for the large point transformer."""
import torch
import torch.nn.functional as F


def train_amp(model, loader, optimizer, scaler, device, log_every=50):
    window = []
    history = []
    logits_cache = {}
    model.train()
    for it, batch in enumerate(loader):
        x, y = batch["x"].to(device), batch["y"].to(device)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        window.append(loss.detach())
        history.append({"it": it, "loss": loss.item(), "scale": scaler.get_scale()})
        logits_cache[it % 4] = logits
        if (it + 1) % log_every == 0:
            print(f"it {it + 1}: loss {torch.stack(window).mean().item():.4f}")
            window.clear()
    return history


def train_amp_accum(model, loader, optimizer, scaler, accum=8):
    accum_loss = 0.0
    model.train()
    for i, (x, y) in enumerate(loader):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y) / accum
        scaler.scale(loss).backward()
        accum_loss += loss
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            print(f"update {(i + 1) // accum}: {float(accum_loss):.4f}")
            accum_loss = 0.0


def train_amp_clean(model, loader, optimizer, scaler, accum=8):
    accum_loss = 0.0
    model.train()
    for i, (x, y) in enumerate(loader):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y) / accum
        scaler.scale(loss).backward()
        accum_loss += loss.detach()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            print(f"update {(i + 1) // accum}: {accum_loss.item():.4f}")
            accum_loss = 0.0


@torch.no_grad()
def evaluate_amp(model, loader, device):
    model.eval()
    total, n = 0.0, 0
    all_logits = []
    for batch in loader:
        x, y = batch["x"].to(device), batch["y"].to(device)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            logits = model(x)
        total += F.cross_entropy(logits.float(), y, reduction="sum")
        n += y.numel()
        all_logits.append(logits.float().cpu())
    return float(total) / max(n, 1), torch.cat(all_logits)
