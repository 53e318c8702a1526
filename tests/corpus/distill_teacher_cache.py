"""Offline-online distillation: teacher logits are cached per sample id after their first computation."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def kd_loss(s_logits, t_logits, T):
    return F.kl_div(F.log_softmax(s_logits / T, -1), F.softmax(t_logits / T, -1), reduction="batchmean") * T * T


def distill(student, teacher, loader, epochs, T=2.0, alpha=0.7):
    teacher.eval()
    opt = torch.optim.AdamW(student.parameters(), lr=5e-4)
    teacher_cache = {}
    agreement = []
    for epoch in range(epochs):
        for ids, x, y in loader:
            key = tuple(ids.tolist())
            if key not in teacher_cache:
                teacher_cache[key] = teacher(x)
            t_logits = teacher_cache[key]
            s_logits = student(x)
            loss = alpha * kd_loss(s_logits, t_logits.detach(), T) + (1 - alpha) * F.cross_entropy(s_logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            agreement.append((s_logits.argmax(-1) == t_logits.argmax(-1)).float().mean())
    return student
