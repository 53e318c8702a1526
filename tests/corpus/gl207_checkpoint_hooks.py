"""Selective activation checkpointing and activation auditing built on saved-tensor hooks."""
import weakref

import torch
from torch.autograd import graph


class _Holder:
    pass


class _Frame:
    def __init__(self, recompute_fn):
        self.recompute_fn = recompute_fn
        self.holders = []
        self.recomputed = {}
        self.replayed = []


class RecomputeHooks(graph.saved_tensors_hooks):
    """Saves nothing: a holder per activation, filled by rerunning the block in backward."""

    def __init__(self, frame):
        def pack_hook(x):
            holder = _Holder()
            frame.holders.append(weakref.ref(holder))
            return holder

        def unpack_hook(holder):
            return frame.recomputed[id(holder)]

        super().__init__(pack_hook, unpack_hook)


class ReplayHooks(graph.saved_tensors_hooks):
    """Active while the block is rerun: records what it would save."""

    def __init__(self, frame):
        def pack_hook(x):
            x = x.detach() if x.requires_grad else x
            frame.replayed.append(x)
            return x

        super().__init__(pack_hook, lambda x: x)


def _offload(x):
    return (x.device, x.to("cpu", non_blocking=True))


def _reload(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    device, cpu = packed
    return cpu.to(device, non_blocking=True)


class KeepSmallHooks(graph.saved_tensors_hooks):
    """Offloads everything but small activations, which are not worth the copy."""

    def __init__(self, threshold):
        def pack_hook(x):
            if x.numel() <= threshold:
                return x
            return _offload(x)

        super().__init__(pack_hook, _reload)


class SaveOnDisk(graph.saved_tensors_hooks):
    def __init__(self, directory):
        self.directory = directory
        self.paths = []
        graph.saved_tensors_hooks.__init__(self, self.pack_to_disk, self.load_from_disk)

    def pack_to_disk(self, tensor):
        path = f"{self.directory}/{len(self.paths)}.pt"
        torch.save(tensor, path)
        self.paths.append(path)
        return path

    def load_from_disk(self, path):
        return torch.load(path, weights_only=True)


class ActivationReport:
    def __init__(self):
        self.saved_bytes = 0
        self.shapes = []


class AuditHooks(graph.saved_tensors_hooks):
    """Counts the bytes autograd keeps per block, for the memory report."""

    def __init__(self, report):
        self.report = report
        graph.saved_tensors_hooks.__init__(self, self.pack, self.unpack)

    def pack(self, tensor):
        self.report.saved_bytes += tensor.numel() * tensor.element_size()
        self.report.shapes.append(tuple(tensor.shape))
        return tensor

    @staticmethod
    def unpack(tensor):
        return tensor


class LeafPassthroughHooks(graph.saved_tensors_hooks):
    """Parameters are saved as they are; everything else as a detached alias."""

    def __init__(self):
        super().__init__(self.pack, self.unpack)

    def pack(self, tensor):
        if tensor.is_leaf:
            return tensor
        return tensor.detach()

    def unpack(self, tensor):
        return tensor


def checkpointed(block, x):
    frame = _Frame(lambda: block(x))
    with RecomputeHooks(frame):
        return block(x)


def audit(model, batch):
    report = ActivationReport()
    with AuditHooks(report):
        model(batch)
    return report
