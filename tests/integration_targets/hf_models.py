"""Tiny transformers training setups, as users write them, for tests/test_integration_huggingface.py.

Models are built from configs in code (no downloads), data is made in memory, everything runs on CPU.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


def tiny_gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))


class TokenDataset(torch.utils.data.Dataset):
    """Random token sequences; labels are the inputs (the model shifts them)."""

    def __init__(self, rows: int = 256, length: int = 12) -> None:
        self.ids = torch.randint(0, 64, (rows, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Regressor(nn.Module):
    """A plain nn.Module the Trainer accepts: forward returns a dict with "loss"."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x, labels=None):
        out = self.net(x).squeeze(-1)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


class RegressionDataset(torch.utils.data.Dataset):
    def __init__(self, rows: int = 256) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(rows, 8, generator=generator)
        self.y = self.x.sum(dim=1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict:
        return {"x": self.x[i], "labels": self.y[i]}


class OutputKeepingTrainer(Trainer):
    """Leaks: keeps each step's model output (logits with their graph) for an epoch-end metric."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.epoch_outputs = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        self.epoch_outputs.append(outputs)
        return (loss, outputs) if return_outputs else loss


class FailingRegressor(Regressor):
    """Raises on its 15th forward (a shape bug in a rare branch)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x, labels=None):
        self.calls += 1
        if self.calls == 15:
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x7 and 8x16)")
        return super().forward(x, labels)


def arguments(output_dir, **overrides) -> TrainingArguments:
    settings = dict(output_dir=str(output_dir), per_device_train_batch_size=4, max_steps=40, report_to=[],
                    use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True, learning_rate=1e-3)
    settings.update(overrides)
    return TrainingArguments(**settings)
