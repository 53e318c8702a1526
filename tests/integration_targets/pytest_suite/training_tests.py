"""A user's test module for the pytest plugin's tests (tests/test_pytest_plugin.py copies it in).

Both probed tests share what a real suite shares: a model, a lazily built cache that whichever
test runs first fills, and the losses the leaky test keeps alive after it ends.
"""

import pytest
import torch
from torch import nn

torch.manual_seed(0)
MODEL = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
OPTIMIZER = torch.optim.SGD(MODEL.parameters(), lr=1e-3)
LOSSES = []  # the leak: every step's loss, with its graph
_FEATURES = {}


@pytest.fixture(autouse=True)
def _teardown_leaves_garbage():
    yield
    # What a teardown often leaves behind: a reference cycle holding a large tensor (1 MiB). The
    # next test's collections free it, in the middle of that test's probe.
    junk = {"activations": torch.randn(256, 1024)}
    junk["self"] = junk


def features(batch_size: int) -> torch.Tensor:
    """A cache filled on first use, by whichever test comes first."""
    if batch_size not in _FEATURES:
        _FEATURES[batch_size] = torch.randn(batch_size, 32)
    return _FEATURES[batch_size]


def train_step() -> torch.Tensor:
    loss = MODEL(features(16)).pow(2).mean()
    OPTIMIZER.zero_grad()
    loss.backward()
    OPTIMIZER.step()
    return loss


@pytest.mark.gradlint_probe(steps=30)
def test_step_keeping_every_loss():
    LOSSES.append(train_step())


@pytest.mark.gradlint_probe(steps=30)
def test_step_keeping_loss_values():
    train_step().item()
