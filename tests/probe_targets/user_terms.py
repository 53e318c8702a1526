"""Leaks whose holder must be named as the user knows it: model outputs kept in a list (by the
list, not by the output's .logits field), a torch.library.custom_op whose setup_context keeps its
output on ctx (by the op and the user's `ctx.y =` line), exceptions kept across steps (by the list
that keeps them, with the finished frame's variables they pin), a buffer registered under a new
name every step (one holder with a count), tensors an installed library made for the user's call (at
the user's line that called it). One set-up at import, one step per function."""

from dataclasses import dataclass

import torch
from torch import nn
from transformers.activations import NewGELUActivation
from transformers.modeling_outputs import CausalLMOutput

torch.manual_seed(0)
model = nn.Linear(32, 32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


@dataclass
class StepOutput:
    """What a hand-written model returns: the loss and the logits, graph attached."""

    loss: torch.Tensor
    logits: torch.Tensor


class Trainer:
    def __init__(self):
        self.epoch_outputs = []  # the leak: every step's output object, with its graph

    def training_step(self):
        logits = model(torch.randn(8, 32))
        out = StepOutput(loss=logits.pow(2).mean(), logits=logits)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        self.epoch_outputs.append(out)


trainer = Trainer()


def keep_output_objects():
    trainer.training_step()


hf_outputs = []
gelu = NewGELUActivation()
library_made = []


def keep_library_made():
    kept = gelu(model(torch.randn(8, 32)))  # its ops run in transformers/activations.py
    kept.sum().backward()
    optimizer.zero_grad()
    library_made.append(kept.detach())


def keep_hf_outputs():
    logits = model(torch.randn(8, 32))
    out = CausalLMOutput(loss=logits.pow(2).mean(), logits=logits)
    out.loss.backward()
    optimizer.zero_grad()
    hf_outputs.append(out)


@torch.library.custom_op("gltest::scaled_sigmoid", mutates_args=())
def scaled_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x) * 2


@scaled_sigmoid.register_fake
def _(x):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.y = output


def _backward(ctx, grad):
    y = ctx.y
    return grad * y * (1 - y / 2)


scaled_sigmoid.register_autograd(_backward, setup_context=_setup_context)
gate_history = []


def custom_op_output_on_ctx():
    gate = scaled_sigmoid(model(torch.randn(8, 32)))
    gate_history.append(gate.detach().mean().item())  # a float: not the leak
    # Backward never runs on this graph (a monitoring pass): the ctx.y cycle waits for gc.


failures = []


def forward_that_fails(batch):
    hidden = model(batch)
    scores = hidden.softmax(-1)
    if scores.shape[0] == 8:
        raise ValueError("bad batch")
    return scores


def keep_exceptions():
    try:
        forward_that_fails(torch.randn(8, 32))
    except ValueError as error:
        failures.append(error)  # its traceback pins forward_that_fails's frame: hidden, scores


class Memory(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0

    def remember(self, x):
        self.register_buffer(f"slot{self.step}", x.detach().clone())
        self.step += 1


memory = Memory()


def register_a_buffer_each_step():
    memory.remember(model(torch.randn(4, 32)))
