"""The bytes of int64 tensors a step saves for backward: GL301's runtime side.

An index saved for backward (`ctx.save_for_backward(index)`, or torch's own IndexBackward0 /
GatherBackward0 saving theirs) is held from forward until backward frees it; it is no growth, so
the step's live set says nothing about it. It is read from the graph itself when backward is
called: every node reachable from the tensors backward starts from is asked for what it saved
(built-in nodes expose it as `_saved_*`, a custom Function's node as `saved_tensors`, its ctx
attributes in its `__dict__`). Measured on torch 2.13 with a Function saving 1e6 int64 indices:
8,000,000 B found, 0.45 ms for the 13-node graph; after backward nothing is readable (freed).

Not with `saved_tensors_hooks`: they see the same bytes, but a pack hook that returns its tensor
makes a cycle that never frees when backward does not run (ground truth: 50 of 50 stuck), and
pushing them hides the user's own hooks (activation checkpointing, CPU offload).

The hook is `torch.autograd._engine_run_backward`, which `torch.autograd.backward` and
`torch.autograd.grad` (so `loss.backward()` too) call; torch's own compiler patches the same
name. It is in place only during the few steps sampled, and put back only if still ours.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import graph

# Steps after warm-up whose backward passes are read: the figure is per step, not a trend.
SAMPLED_STEPS = 3


@dataclass
class SavedIndex:
    subject: str  # as GL301 names it: "GatherRows" (save_for_backward), "GatherRows.ctx.index", "IndexBackward0"
    bytes_per_step: float  # int64 bytes saved until backward, median of the sampled steps
    file: str = ""
    line: int = 0
    detail: str = ""

    @property
    def int32_bytes(self) -> float:
        return self.bytes_per_step / 2


class SavedIndexSampler:
    """Reads each backward's graph during the steps it is started for."""

    def __init__(self) -> None:
        self.samples: list[dict[str, int]] = []  # one per sampled step: subject -> int64 bytes
        self.where: dict[str, tuple[str, int, str]] = {}  # subject -> (file, line, detail)
        self._step: dict[str, int] | None = None
        self._storages: set[int] = set()
        self._original = None
        self._wrapper = None

    @property
    def wanted(self) -> bool:
        return len(self.samples) < SAMPLED_STEPS

    def start(self) -> None:
        import torch

        self._step, self._storages = {}, set()
        current = getattr(torch.autograd, "_engine_run_backward", None)
        if current is None:
            return
        original = current

        def run_backward(t_outputs, *args, **kwargs):
            try:
                self._read(t_outputs)
            except Exception:  # noqa: BLE001, S110 - reading the graph must never break the user's backward
                pass
            return original(t_outputs, *args, **kwargs)

        self._original, self._wrapper = original, run_backward
        torch.autograd._engine_run_backward = run_backward

    def stop(self, keep: bool) -> None:
        import torch

        if self._wrapper is not None and getattr(torch.autograd, "_engine_run_backward", None) is self._wrapper:
            torch.autograd._engine_run_backward = self._original
        self._original = self._wrapper = None
        if keep and self._step is not None:
            self.samples.append(self._step)
        self._step = None

    def _read(self, t_outputs) -> None:
        import torch
        from torch.utils._python_dispatch import _disable_current_modes

        roots = [t_outputs] if isinstance(t_outputs, torch.Tensor) else list(t_outputs)
        step = self._step
        if step is None:
            return
        # Nodes are told apart by id only while their wrappers are held (`keep`): torch 2.11 frees
        # a wrapper with its last reference, so a set of ids kept across backward calls took a
        # later call's nodes for read ones. Across calls, a storage is counted once (_storages).
        seen: set[int] = set()
        keep: list = []
        # Reading a saved slot unpacks it: not an op of the user's step for the tracker to see.
        with _disable_current_modes():
            for root in roots:
                node = getattr(root, "grad_fn", None) or getattr(root, "node", None)  # a tensor or a GradientEdge
                for saver, name, saved in graph.saved_slots(node, seen, keep):
                    if saved.dtype != torch.int64:
                        continue
                    storage = saved.untyped_storage()
                    key = storage._cdata
                    if key in self._storages:
                        continue
                    self._storages.add(key)
                    subject = self._subject(saver, name)
                    step[subject] = step.get(subject, 0) + storage.nbytes()

    def _subject(self, node, slot: str) -> str:
        import torch

        from .attribute import _ctx_store_line, _save_call_line, node_function

        function = node_function(node) if isinstance(node, torch.autograd.function.BackwardCFunction) else None
        if function is not None:
            attribute = slot.startswith("ctx.")
            subject = f"{function.name}.{slot}" if attribute else function.name
            if subject not in self.where:
                stored = _ctx_store_line(function, slot[4:]) if attribute else _save_call_line(function)
                how = slot if attribute else "save_for_backward"
                self.where[subject] = (function.file, stored or function.line,
                                       f"{function.what} keeps int64 tensors ({how}) until backward")
            return subject
        name = type(node).__name__
        if name not in self.where:
            self.where[name] = ("", 0, f"torch's {name} saves its int64 index until backward")
        return name

    def result(self) -> list[SavedIndex]:
        if not self.samples:
            return []
        subjects = sorted({s for sample in self.samples for s in sample})
        found = []
        for subject in subjects:
            values = sorted(sample.get(subject, 0) for sample in self.samples)
            median = values[len(values) // 2]
            if median > 0:
                file, line, detail = self.where.get(subject, ("", 0, ""))
                found.append(SavedIndex(subject, float(median), os.fspath(file), line, detail))
        found.sort(key=lambda s: -s.bytes_per_step)
        return found
