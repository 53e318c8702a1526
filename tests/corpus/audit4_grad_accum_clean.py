import torch
import torch.nn as nn
import torch.nn.functional as F


def multitask_loss(outputs, batch, weights):
    loss = 0.0
    parts = {}
    for name, w in weights.items():
        part = F.cross_entropy(outputs[name], batch[name])
        parts[name] = part.item()
        loss += w * part
    return loss, parts


def train(model, loader, epochs=3, accum_steps=8, lr=2e-5):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    weights = {"intent": 1.0, "slot": 0.5}
    log = {"loss": [], "intent": [], "slot": []}
    for epoch in range(epochs):
        accum = 0.0
        micro = []
        for step, batch in enumerate(loader):
            outputs = model(batch["input_ids"], batch["attention_mask"])
            loss, parts = multitask_loss(outputs, batch, weights)
            micro.append(loss / accum_steps)
            accum = accum + loss.detach() / accum_steps
            if (step + 1) % accum_steps == 0:
                torch.stack(micro).sum().backward()
                micro.clear()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                log["loss"].append(float(accum))
                for k, v in parts.items():
                    log[k].append(v)
                accum = 0.0
    return log


def train_sum_style(model, loader, accum_steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pending = 0
    for i, (x, y) in enumerate(loader):
        pending = pending + F.mse_loss(model(x), y) / accum_steps
        if (i + 1) % accum_steps == 0:
            pending.backward()
            opt.step()
            opt.zero_grad()
            pending = 0
