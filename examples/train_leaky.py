"""A small training loop with the classic memory leaks.

Run `gradlint check examples/train_leaky.py`, then compare with train_clean.py.
`python examples/train_leaky.py` trains on random data and still "works": the leaks only
show up as memory that climbs every step.
"""
import torch
import torch.nn.functional as F
from torch import nn


class PointEncoder(nn.Module):
    def __init__(self, in_dim=3, hidden=64, num_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, num_classes)
        self.activations = []

    def forward(self, pts):
        h = torch.relu(self.fc1(pts))
        h = torch.relu(self.fc2(h))
        pooled = h.max(dim=1).values
        self.activations.append(pooled)  # GL102: keeps every step's graph alive
        return self.head(pooled)


def make_loader(num_batches=20, batch_size=8, num_points=128):
    return [(torch.randn(batch_size, num_points, 3), torch.randint(0, 10, (batch_size,)))
            for _ in range(num_batches)]


def train(model, loader, optimizer, epochs=3):
    losses = []
    total_loss = 0.0
    for epoch in range(epochs):
        for pts, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(pts), labels)
            loss.backward()
            optimizer.step()
            losses.append(loss)  # GL103: the list keeps every step's graph
            total_loss += loss  # GL104: chains every step's graph onto total_loss
        print(f"epoch {epoch}: mean loss {float(total_loss) / ((epoch + 1) * len(loader)):.4f}")
    return losses


if __name__ == "__main__":
    torch.manual_seed(0)
    model = PointEncoder()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    train(model, make_loader(), optimizer)
