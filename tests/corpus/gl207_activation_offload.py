"""Activation offloading, quantization and memory accounting with saved-tensor hooks.

Used to fit long point-cloud sequences on one GPU: large saved activations go to pinned host
memory or to int8, and a debug mode counts what autograd keeps.
"""
import itertools

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks


class CPUOffloadHooks(saved_tensors_hooks):
    """Moves large saved activations to pinned CPU memory; small ones stay where they are."""

    def __init__(self, min_bytes=1 << 20, pin_memory=True):
        self.min_bytes = min_bytes
        self.pin_memory = pin_memory
        super().__init__(self.pack, self.unpack)

    def pack(self, tensor):
        if tensor.numel() * tensor.element_size() < self.min_bytes:
            return tensor
        cpu = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout, pin_memory=self.pin_memory)
        cpu.copy_(tensor, non_blocking=True)
        return (tensor.device, cpu)

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        device, cpu = packed
        return cpu.to(device, non_blocking=True)


class TrackedOffload(saved_tensors_hooks):
    """Offloads activations by handle and leaves parameters and constants where they are."""

    def __init__(self, device="cuda"):
        self.device = device
        self.storage = {}
        self.ids = itertools.count()
        super().__init__(self._pack, self._unpack)

    def _pack(self, t):
        if isinstance(t, nn.Parameter) or not t.requires_grad:
            return t
        key = next(self.ids)
        self.storage[key] = t.to("cpu", non_blocking=True)
        return key

    def _unpack(self, key):
        if isinstance(key, torch.Tensor):
            return key
        return self.storage.pop(key).to(self.device, non_blocking=True)


SAVED_BYTES = []


def count_saved(t):
    SAVED_BYTES.append(t.numel() * t.element_size())
    return t


def identity(t):
    return t


def measure_activation_memory(model, batch):
    SAVED_BYTES.clear()
    with saved_tensors_hooks(count_saved, identity):
        out = model(batch)
    return out, sum(SAVED_BYTES)


def quantize_pack(t):
    if t.dtype != torch.float32:
        return t
    scale = t.abs().amax().clamp(min=1e-8) / 127
    return (torch.round(t / scale).to(torch.int8), scale)


def dequantize_unpack(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    q, scale = packed
    return q.to(torch.float32) * scale


class QuantizedActivations(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        with saved_tensors_hooks(quantize_pack, dequantize_unpack):
            return self.block(x)


def debug_saved(model, batch, log):
    def pack(t):
        log.append((tuple(t.shape), t.dtype, t.device))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        return model(batch)


def offload_with_lambdas(model, batch):
    with saved_tensors_hooks(lambda t: (t.device, t.cpu()), lambda p: p[1].to(p[0])):
        return model(batch)


def passthrough(model, batch):
    with saved_tensors_hooks(lambda t: t, lambda t: t):
        return model(batch)


def detach_pack(t):
    return t.detach()


@torch.no_grad()
def evaluate(model, loader):
    total = 0.0
    for batch, target in loader:
        total += (model(batch).argmax(-1) == target).float().mean().item()
    return total / max(len(loader), 1)


def train_step(model, optimizer, batch, target, offload):
    hooks = CPUOffloadHooks() if offload else saved_tensors_hooks(detach_pack, identity)
    with hooks:
        loss = nn.functional.cross_entropy(model(batch), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def sample_grads(model, batch):
    out = model(batch)
    out.register_hook(lambda g: g)
    out.sum().backward()
