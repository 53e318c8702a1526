"""Two-loss GAN steps for the point-cloud generator (PC-GAN / TreeGAN style)."""
import torch
import torch.nn.functional as F


def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1, 1, device=real.device)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    score = critic(mixed)
    grad, = torch.autograd.grad(score.sum(), mixed, create_graph=True)
    return ((grad.flatten(1).norm(dim=1) - 1) ** 2).mean()


def gan_step(gen, critic, opt_g, opt_d, real, z, gp_weight=10.0):
    fake = gen(z)
    loss_d = critic(fake).mean() - critic(real).mean()
    loss_d = loss_d + gp_weight * gradient_penalty(critic, real, fake)
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward(retain_graph=True)
    opt_d.step()
    loss_g = -critic(fake).mean()
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    return loss_d.item(), loss_g.item()


def gan_step_reversed(gen, critic, opt_g, opt_d, real, z):
    fake = gen(z)
    loss_g = F.softplus(-critic(fake)).mean()
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    loss_d = F.softplus(critic(fake.detach())).mean() + F.softplus(-critic(real)).mean()
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward(retain_graph=True)
    opt_d.step()
    torch.cuda.empty_cache()
    return loss_d.item(), loss_g.item()


def train_gan(gen, critic, opt_g, opt_d, loader, z_dim, device):
    stats = {"d": 0.0, "g": 0.0, "n": 0}
    for it, real in enumerate(loader):
        real = real.to(device)
        z = torch.randn(real.size(0), z_dim, device=device)
        fake = gen(z)
        loss_d = F.relu(1.0 - critic(real)).mean() + F.relu(1.0 + critic(fake)).mean()
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward(retain_graph=True)
        opt_d.step()
        stats["d"] += loss_d.item()
        loss_g = -critic(fake).mean()
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward(retain_graph=False)
        opt_g.step()
        stats["g"] += loss_g.item()
        stats["n"] += 1
        if it % 200 == 0:
            torch.cuda.empty_cache()
    return {k: v / max(stats["n"], 1) for k, v in stats.items() if k != "n"}


def feature_matching_step(gen, critic, opt_g, real, z, keep_graph):
    fake = gen(z)
    f_real = critic.features(real).mean(0)
    f_fake = critic.features(fake).mean(0)
    loss_fm = F.mse_loss(f_fake, f_real.detach())
    opt_g.zero_grad(set_to_none=True)
    loss_fm.backward(retain_graph=keep_graph)
    opt_g.step()
    return loss_fm.item()


def two_critic_step(gen, critics, opt_g, opt_ds, real, z):
    fake = gen(z)
    losses = [F.softplus(c(fake)).mean() + F.softplus(-c(real)).mean() for c in critics]
    for opt_d in opt_ds:
        opt_d.zero_grad(set_to_none=True)
    torch.autograd.backward(losses, retain_graph=True)
    for opt_d in opt_ds:
        opt_d.step()
    return [loss.item() for loss in losses]


def fit(gen, critic, opt_g, opt_d, loader, z_dim, device, epochs):
    history = []
    for epoch in range(epochs):
        history.append(train_gan(gen, critic, opt_g, opt_d, loader, z_dim, device))
        print(f"epoch {epoch}: {history[-1]}")
    torch.cuda.empty_cache()
    return history
