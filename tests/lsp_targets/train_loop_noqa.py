import torch


def train(model, loader, optimizer, criterion):
    total_loss = 0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total_loss += loss  # noqa: E501 (kept long on purpose)
    return total_loss
