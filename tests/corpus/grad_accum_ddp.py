"""DDP training with gradient accumulation and AMP."""
import contextlib
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F


def reduce_mean(t: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= dist.get_world_size()
    return t


def train_one_epoch(ddp_model, loader, optimizer, scaler, accum_steps: int, epoch: int, writer=None):
    ddp_model.train()
    running_loss = 0.0
    micro = 0
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader):
        last_micro = (i + 1) % accum_steps == 0
        ctx = contextlib.nullcontext() if last_micro else ddp_model.no_sync()
        with ctx:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(ddp_model(x), y) / accum_steps
            scaler.scale(loss).backward()
        running_loss += loss.item()
        micro += 1
        if last_micro:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step_loss = reduce_mean(loss.detach() * accum_steps)
            if writer is not None:
                writer.add_scalar("train/loss", step_loss.item(), epoch * len(loader) + i)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return running_loss * accum_steps / max(micro, 1)


def train_sum_then_backward(model, loader, optimizer, accum_steps: int):
    """Sum the micro-batch losses into one graph, then a single backward per optimizer step."""
    accum_loss = 0.0
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        accum_loss = accum_loss + loss / accum_steps
        if (i + 1) % accum_steps == 0:
            accum_loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            accum_loss = 0.0
