"""HF Trainer subclass for MoE fine-tuning: router aux loss + per-expert load logging."""
import torch
import torch.nn.functional as F
from transformers import Trainer, TrainerCallback


class MoETrainer(Trainer):
    def __init__(self, *args, aux_coef=0.01, **kwargs):
        super().__init__(*args, **kwargs)
        self.aux_coef = aux_coef
        self.router_history = []
        self.aux_running = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs, output_router_logits=True)
        lm_loss = outputs.loss
        router_probs = torch.stack([F.softmax(r, dim=-1) for r in outputs.router_logits])
        load = router_probs.mean(dim=(0, 1))
        aux = load.numel() * (load * load).sum()
        self.router_history.append(load)
        if self.aux_running is None:
            self.aux_running = aux
        else:
            self.aux_running = 0.98 * self.aux_running + 0.02 * aux
        loss = lm_loss + self.aux_coef * aux
        return (loss, outputs) if return_outputs else loss


class ExpertLoadCallback(TrainerCallback):
    def __init__(self, trainer):
        self.trainer = trainer

    def on_log(self, args, state, control, logs=None, **kwargs):
        hist = self.trainer.router_history
        if hist and logs is not None:
            load = torch.stack(hist[-50:]).mean(0)
            logs["expert_load_max"] = load.max().item()
            logs["aux_ema"] = float(self.trainer.aux_running)
