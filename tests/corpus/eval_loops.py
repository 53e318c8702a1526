"""Evaluation and analysis helpers for the segmentation experiments."""
import torch
import torch.nn.functional as F


def predict_all(model, loader, device):
    model.eval()
    preds = []
    for xb in loader:
        out = model(xb.to(device))
        preds.extend(out)
    return torch.stack(preds)


def loss_curve(model, loader, optimizer, criterion, epochs):
    curve = {}
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        curve[epoch] = loss
    return curve


def hardest_batches(model, loader, criterion, keep=8):
    model.eval()
    recent = []
    for x, y in loader:
        loss = criterion(model(x), y)
        recent.insert(0, loss)
        del recent[keep:]
    return max(recent, key=float)


def validate_loss(model, loader, criterion):
    model.eval()
    loss_sum = 0.0
    n = 0
    for x, y in loader:
        loss_sum = loss_sum + criterion(model(x), y) * x.size(0)
        n += x.size(0)
    return float(loss_sum) / max(n, 1)


def validate(model, loader, criterion):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            loss_sum = loss_sum + criterion(logits, y) * x.size(0)
            correct += (logits.argmax(1) == y).sum().item()
            n += x.size(0)
    return float(loss_sum) / max(n, 1), correct / max(n, 1)


@torch.inference_mode()
def collect_embeddings(encoder, loader):
    feats, labels = [], []
    for x, y in loader:
        feats.append(encoder(x))
        labels.append(y)
    return torch.cat(feats), torch.cat(labels)


def per_class_iou(model, loader, num_classes):
    inter = torch.zeros(num_classes)
    union = torch.zeros(num_classes)
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            pred = model(x).argmax(-1)
            for c in range(num_classes):
                p, t = pred == c, y == c
                inter[c] += (p & t).sum()
                union[c] += (p | t).sum()
    return inter / union.clamp_min(1)


def tta_logits(model, x, flips=(None, -1, -2)):
    outs = []
    for dim in flips:
        xi = x if dim is None else x.flip(dim)
        outs.append(F.log_softmax(model(xi), dim=-1))
    return torch.stack(outs).logsumexp(0)
