"""A transformers Trainer subclass whose compute_loss keeps every batch's logits "for the metrics
at the end", on a tiny GPT-2 built from a config (no download); probed with LeakProbeCallback."""

import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from gradlint.integrations.huggingface import LeakProbeCallback

import _report


class KeepingTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.all_logits = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        self.all_logits.append(outputs.logits)
        return (outputs.loss, outputs) if return_outputs else outputs.loss


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=2048, length=16):
        self.ids = torch.randint(0, 64, (n, length))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


if __name__ == "__main__":
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    probe = LeakProbeCallback(steps=40, stop_when_done=True)
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8, max_steps=200,
                             report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                             disable_tqdm=True, dataloader_num_workers=0)
    trainer = KeepingTrainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens(), callbacks=[probe])
    trainer.train()
    _report.save(probe.report)
