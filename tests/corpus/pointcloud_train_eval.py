"""Train and evaluate a point-cloud segmentation model, clearing the CUDA cache per batch."""
import torch
import torch.nn.functional as F


def train_one_epoch(model, train_loader, optimizer, device):
    model.train()
    seen = 0
    for points, labels in train_loader:
        points, labels = points.to(device), labels.to(device)
        with torch.no_grad():
            centroid = points.mean(dim=1, keepdim=True)
        logits = model(points - centroid)
        loss = F.cross_entropy(logits.transpose(1, 2), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        seen += labels.numel()
        torch.cuda.empty_cache()
    return seen


@torch.inference_mode()
def predict(model, test_loader, device):
    model.eval()
    out = []
    for points in test_loader:
        out.append(model(points.to(device)).argmax(dim=1).cpu())
        torch.cuda.empty_cache()
    return torch.cat(out)


def evaluate(model, val_loader, device, num_classes):
    model.eval()
    hits = torch.zeros(num_classes, device=device)
    for points, labels in val_loader:
        with torch.no_grad():
            pred = model(points.to(device)).argmax(dim=1)
        hits += torch.bincount(pred[pred == labels.to(device)], minlength=num_classes)
        torch.cuda.empty_cache()
    return hits
