"""AMP training and evaluation steps for the mesh segmentation model."""
import gc

import torch as th
import torch.nn.functional as F


def amp_step(model, batch, optimizer, scaler, aux_weight=0.4):
    with th.autocast(device_type="cuda", dtype=th.float16):
        logits, aux = model(batch["x"])
        loss = F.cross_entropy(logits, batch["y"])
        loss_aux = F.cross_entropy(aux, batch["y"])
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward(retain_graph=True)
    scaler.scale(aux_weight * loss_aux).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.item(), loss_aux.item()


def amp_step_aux_last(model, batch, optimizer, scaler):
    with th.autocast(device_type="cuda", dtype=th.bfloat16):
        logits, aux = model(batch["x"])
        loss = F.cross_entropy(logits, batch["y"]) + 0.4 * F.cross_entropy(aux, batch["y"])
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward(retain_graph=True)
    scaler.step(optimizer)
    scaler.update()
    th.cuda.empty_cache()
    return loss.item()


def train_epoch(model, loader, optimizer, scaler, device, clear_every=0):
    model.train()
    running = 0.0
    for i, batch in enumerate(loader):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        running += amp_step(model, batch, optimizer, scaler)[0]
        if clear_every and (i + 1) % clear_every == 0:
            th.cuda.empty_cache()
    return running / max(len(loader), 1)


@th.no_grad()
def evaluate(model, loader, device, num_classes):
    model.eval()
    confusion = th.zeros(num_classes, num_classes, dtype=th.long, device=device)
    for batch in loader:
        logits, _ = model(batch["x"].to(device))
        pred = logits.argmax(dim=1).flatten()
        target = batch["y"].to(device).flatten()
        confusion += th.bincount(target * num_classes + pred, minlength=num_classes ** 2).view(num_classes, num_classes)
        th.cuda.empty_cache()
    iou = confusion.diag() / (confusion.sum(0) + confusion.sum(1) - confusion.diag()).clamp_min(1)
    return iou.mean().item()


def find_batch_size(model, make_batch, optimizer, start=64):
    bs = start
    while bs >= 1:
        try:
            batch = make_batch(bs)
            loss = F.cross_entropy(model(batch["x"])[0], batch["y"])
            loss.backward()
            optimizer.zero_grad(set_to_none=True)
            return bs
        except th.cuda.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            gc.collect()
            th.cuda.empty_cache()
            bs //= 2
    raise RuntimeError("even batch size 1 does not fit")


def release(model, optimizer):
    model.cpu()
    optimizer.state.clear()
    gc.collect()
    th.cuda.empty_cache()


def main(model, optimizer, scaler, train_loader, val_loader, device, epochs, num_classes):
    best = 0.0
    for epoch in range(epochs):
        loss = train_epoch(model, train_loader, optimizer, scaler, device)
        miou = evaluate(model, val_loader, device, num_classes)
        best = max(best, miou)
        print(f"epoch {epoch}: loss {loss:.4f} mIoU {miou:.4f} (best {best:.4f})")
    release(model, optimizer)
    th.cuda.empty_cache()
    return best
