"""Step functions for the segmentation trainer; the outer loop lives in the launcher."""
import torch
import torch.nn.functional as F

LOSS_LOG = []
EPOCH_LOSS = 0.0
STEP = 0


def train_step(model, batch, optimizer, criterion):
    global EPOCH_LOSS, STEP
    optimizer.zero_grad(set_to_none=True)
    logits = model(batch["points"])
    loss = criterion(logits, batch["labels"])
    loss.backward()
    optimizer.step()
    LOSS_LOG.append(loss)
    EPOCH_LOSS += loss
    STEP += 1
    return loss.item()


def collect_step(model, batch, outputs, targets):
    logits = model(batch["points"])
    outputs.append(logits)
    targets.append(batch["labels"])
    return logits


def make_train_step(model, optimizer, loss_fn, keep_last=100):
    recent = []

    def step(x, y):
        optimizer.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        optimizer.step()
        recent.append(loss)
        if len(recent) > keep_last:
            del recent[0]
        return loss.detach()

    return step, recent


def multi_task_step(model, batch, optimizer, weights):
    optimizer.zero_grad()
    outs = model(batch["x"])
    terms = []
    for name, w in weights.items():
        terms.append(w * F.cross_entropy(outs[name], batch[name]))
    loss = torch.stack(terms).sum()
    loss.backward()
    optimizer.step()
    return {"loss": loss.item(), "terms": [t.item() for t in terms]}


class Trainer:
    def __init__(self, model, optimizer, criterion, clip=1.0):
        self.model = model
        self.optimizer = optimizer
        self.criterion = criterion
        self.clip = clip
        self.loss_sum = 0.0
        self.num_steps = 0
        self.history = []
        self.grad_norms = []

    def step(self, x, y):
        self.optimizer.zero_grad()
        out = self.model(x)
        loss = self.criterion(out, y)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        self.loss_sum += loss
        self.num_steps += 1
        self.history.append(loss.item())
        self.grad_norms.append(float(gn))
        return out.detach()

    def mean_loss(self):
        return float(self.loss_sum) / max(self.num_steps, 1)


@torch.no_grad()
def eval_step(model, batch, outputs):
    logits = model(batch["points"])
    outputs.append(logits)
    return logits.argmax(-1)


@torch.inference_mode()
def predict(model, batches):
    preds = []
    for batch in batches:
        preds.append(model(batch["points"]).softmax(-1))
    return torch.cat(preds)
