import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(out, x)
        return tuple(out)

    def backward(ctx, *grads):
        all_g = torch.stack(grads)
        dist.all_reduce(all_g)
        return all_g[dist.get_rank()]


class PairNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pair, eps):
        a, b = pair
        na, nb = a.norm(dim=-1, keepdim=True) + eps, b.norm(dim=-1, keepdim=True) + eps
        ctx.save_for_backward(a, b, na, nb)
        return a / na, b / nb

    @staticmethod
    def backward(ctx, ga, gb):
        a, b, na, nb = ctx.saved_tensors
        ua, ub = a / na, b / nb
        return (ga - ua * (ga * ua).sum(-1, keepdim=True)) / na, None


def simclr_loss(z1, z2, temp=0.1):
    z1, z2 = PairNorm.apply([z1, z2], 1e-6)
    z = torch.cat([torch.cat(GatherWithGrad.apply(z1)), torch.cat(GatherWithGrad.apply(z2))])
    sim = z @ z.t() / temp
    sim.fill_diagonal_(float("-inf"))
    n = z.size(0) // 2
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, targets)


def train(model, loader, epochs, rank):
    opt = torch.optim.LARS(model.parameters(), lr=0.3) if hasattr(torch.optim, "LARS") else torch.optim.SGD(model.parameters(), lr=0.3)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        epoch_loss = torch.zeros((), device=f"cuda:{rank}")
        for (v1, v2), _ in loader:
            loss = simclr_loss(model(v1.cuda(rank)), model(v2.cuda(rank)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            reduced = loss.clone()
            dist.all_reduce(reduced, op=dist.ReduceOp.AVG)
            epoch_loss += reduced
        if rank == 0:
            print(f"epoch {epoch} loss {epoch_loss.item() / len(loader):.4f}")
