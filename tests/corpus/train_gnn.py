"""Train the molecular property GNN on QM9-style regression targets."""
import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


class MPNN(nn.Module):
    def __init__(self, in_dim, hidden=128, layers=4, num_tasks=12):
        super().__init__()
        self.embed = nn.Linear(in_dim, hidden)
        self.convs = nn.ModuleList(nn.Linear(2 * hidden, hidden) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, num_tasks))

    def forward(self, x, edge_index, batch, num_graphs):
        h = self.embed(x)
        src, dst = edge_index[0], edge_index[1]
        for conv in self.convs:
            agg = torch.zeros_like(h).index_add_(0, dst, h[src])
            h = h + F.silu(conv(torch.cat([h, agg], dim=-1)))
        pooled = torch.zeros(num_graphs, h.size(-1), device=h.device).index_add_(0, batch, h)
        return self.head(pooled)


def train(model, train_loader, val_loader, optimizer, epochs, device):
    losses = []
    total_loss = 0.0
    for epoch in range(epochs):
        model.train()
        start = time.time()
        for batch in train_loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            pred = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
            loss = F.mse_loss(pred, batch.y)
            loss.backward()
            optimizer.step()
            losses.append(loss)
            total_loss += loss
        val = evaluate(model, val_loader, device)
        mean_loss = float(total_loss) / len(train_loader)
        print(f"epoch {epoch:3d}  train {mean_loss:.4f}  val {val:.4f}  ({time.time() - start:.1f}s)")
        total_loss = 0.0
    return losses


def evaluate(model, loader, device):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in loader:
            batch = batch.to(device)
            pred = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
            total += F.mse_loss(pred, batch.y, reduction="sum")
            count += batch.y.numel()
    return float(total) / max(count, 1)


def train_clean(model, train_loader, optimizer, epochs, device):
    history = []
    for epoch in range(epochs):
        model.train()
        running, seen = 0.0, 0
        for batch in train_loader:
            batch = batch.to(device)
            optimizer.zero_grad(set_to_none=True)
            pred = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
            loss = F.mse_loss(pred, batch.y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            optimizer.step()
            running += loss.item() * batch.num_graphs
            seen += batch.num_graphs
            history.append(loss.item())
        print(f"epoch {epoch}: {running / max(seen, 1):.4f}")
    return history


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    from data import make_loaders

    train_loader, val_loader = make_loaders(batch_size=64)
    model = MPNN(in_dim=11).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-5)
    train(model, train_loader, val_loader, optimizer, args.epochs, args.device)


if __name__ == "__main__":
    main()
