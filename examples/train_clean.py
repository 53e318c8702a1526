"""The training loop of train_leaky.py without the leaks.

- store Python numbers (`loss.item()`) or detached tensors, never the loss itself;
- keep module-side statistics detached;
- evaluate under torch.no_grad().
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
        self.register_buffer("feat_mean", torch.zeros(hidden))
        self.last_pooled = None

    def forward(self, pts):
        h = torch.relu(self.fc1(pts))
        h = torch.relu(self.fc2(h))
        pooled = h.max(dim=1).values
        self.last_pooled = pooled.detach()
        if self.training:
            with torch.no_grad():
                self.feat_mean.mul_(0.99).add_(pooled.mean(0), alpha=0.01)
        return self.head(pooled)


def make_loader(num_batches=20, batch_size=8, num_points=128):
    return [(torch.randn(batch_size, num_points, 3), torch.randint(0, 10, (batch_size,)))
            for _ in range(num_batches)]


def train(model, loader, optimizer, epochs=3):
    losses = []
    total_loss = 0.0
    for epoch in range(epochs):
        model.train()
        for pts, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(pts), labels)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            total_loss += loss.item()
        print(f"epoch {epoch}: mean loss {total_loss / ((epoch + 1) * len(loader)):.4f}")
    return losses


def evaluate(model, loader):
    model.eval()
    correct, seen = 0, 0
    with torch.no_grad():
        for pts, labels in loader:
            correct += (model(pts).argmax(-1) == labels).sum().item()
            seen += labels.numel()
    return correct / max(seen, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = PointEncoder()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = make_loader()
    train(model, loader, optimizer)
    print(f"accuracy: {evaluate(model, loader):.3f}")
