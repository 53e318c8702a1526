"""Activation capture with forward hooks, Grad-CAM, and saved-tensor offloading."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

ACTIVATIONS = []


def save_activation_hook(module, inputs, output):
    ACTIVATIONS.append(output)


class FeatureExtractor:
    def __init__(self, model, layers):
        self.features = {}
        self.handles = []
        for name, mod in model.named_modules():
            if name in layers:
                self.handles.append(mod.register_forward_hook(self._make_hook(name)))

    def _make_hook(self, name):
        def hook(module, inp, out):
            self.features[name] = out.detach()

        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


class GradCAM:
    def __init__(self, model, target_layer):
        self.model = model
        self.activations = None
        self.gradients = None
        target_layer.register_forward_hook(self._fwd)
        target_layer.register_full_backward_hook(self._bwd)

    def _fwd(self, module, inp, out):
        self.activations = out.detach()

    def _bwd(self, module, grad_in, grad_out):
        self.gradients = grad_out[0].detach()

    def __call__(self, x, class_idx=None):
        logits = self.model(x)
        if class_idx is None:
            class_idx = logits.argmax(1)
        self.model.zero_grad()
        logits.gather(1, class_idx.view(-1, 1)).sum().backward()
        weights = self.gradients.mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * self.activations).sum(1))
        return cam / cam.amax(dim=(1, 2), keepdim=True).clamp(min=1e-6)


def pack_to_cpu(t):
    if t.device.type == "cuda":
        return (t.device, t.to("cpu", non_blocking=True))
    return (t.device, t)


def unpack_from_device(packed):
    device, t = packed
    return t.to(device, non_blocking=True)


class Fp16Offload(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self):
        super().__init__(self.pack, self.unpack)

    @staticmethod
    def pack(t):
        if t.dtype == torch.float32:
            return t.dtype, t.half()
        return t.dtype, t.detach()

    @staticmethod
    def unpack(packed):
        dtype, t = packed
        return t.to(dtype)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class FeatureStatTracker(nn.Module):
    def __init__(self, dim, depth=6, momentum=0.1):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.momentum = momentum
        self.register_buffer("feat_mean", torch.zeros(dim))

    def forward(self, x):
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if self.training else blk(x)
        self.feat_mean = (1 - self.momentum) * self.feat_mean + self.momentum * x.mean((0, 1))
        return x - self.feat_mean


def train(model, loader, opt, epochs):
    model.blocks[-1].register_forward_hook(save_activation_hook)
    for epoch in range(epochs):
        for x, y in loader:
            with torch.autograd.graph.saved_tensors_hooks(pack_to_cpu, unpack_from_device):
                loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f}, {len(ACTIVATIONS)} activations captured")
