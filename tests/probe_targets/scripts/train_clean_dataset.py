"""A clean script whose data is built at import: a list of per-sample tensors read one per step.

Before the fix the first read of each sample was charged to the step that read it (a false
"retained 6.0 KiB/step, held by DATASET")."""

import sys

import torch

torch.manual_seed(0)
# 6.2 KiB a sample, inputs and target side by side, made before any step
DATASET = [torch.randn(48, 33) for _ in range(400)]

model = torch.nn.Linear(32, 1)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
for i in range(steps):
    sample = DATASET[i % len(DATASET)]
    x, y = sample[:, :32], sample[:, 32:]
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
