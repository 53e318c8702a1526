"""Steps that run a torch.compile'd model: the probe's dispatch mode must not be traced by Dynamo."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
compiled = torch.compile(model, backend="aot_eager")  # Dynamo and AOTAutograd, no C++ codegen
losses = []


def clean_step():
    loss = compiled(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def keep_losses():
    loss = compiled(torch.randn(8, 16)).pow(2).mean()
    loss.backward()
    losses.append(loss)
