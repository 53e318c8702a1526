import torch
import torch.nn as nn
import torch.nn.functional as F


class ScaledBagLookup(torch.autograd.Function):
    """EmbeddingBag(mode='sum') with per-sample weights rescaled by a popularity prior."""

    @staticmethod
    def forward(ctx, weight, indices, offsets, per_sample_weights, prior):
        per_sample_weights.mul_(prior[indices])
        out = F.embedding_bag(indices, weight, offsets, mode="sum",
                              per_sample_weights=per_sample_weights)
        ctx.save_for_backward(weight, indices, offsets, per_sample_weights)
        ctx.num_rows = weight.size(0)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        weight, indices, offsets, psw = ctx.saved_tensors
        bag_of = torch.bucketize(torch.arange(indices.numel()), offsets, right=True) - 1
        rows = grad_out[bag_of] * psw[:, None]
        grad_w = torch.zeros(ctx.num_rows, grad_out.size(1), dtype=grad_out.dtype)
        grad_w.index_put_((indices,), rows, accumulate=True)
        grad_psw = (grad_out[bag_of] * weight[indices]).sum(-1)
        return grad_w, None, None, grad_psw


class TwoTower(nn.Module):
    def __init__(self, n_users, n_items, dim=64):
        super().__init__()
        self.user = nn.Embedding(n_users, dim)
        self.item_weight = nn.Parameter(torch.randn(n_items, dim) * 0.01)
        self.register_buffer("prior", torch.ones(n_items))

    def forward(self, user_ids, hist_items, hist_offsets, hist_weights):
        u = self.user(user_ids)
        h = ScaledBagLookup.apply(self.item_weight, hist_items, hist_offsets, hist_weights, self.prior)
        return F.normalize(u + h, dim=-1)


def train(model, loader, epochs=3):
    opt = torch.optim.SparseAdam(list(model.parameters()), lr=1e-3)
    for _ in range(epochs):
        for user_ids, items, offsets, weights, pos_items in loader:
            q = model(user_ids, items, offsets, weights)
            cand = F.normalize(model.item_weight[pos_items], dim=-1)
            logits = q @ cand.t() / 0.05
            loss = F.cross_entropy(logits, torch.arange(len(q)))
            opt.zero_grad()
            loss.backward()
            opt.step()
