"""Non-saturating GAN with lazy R1 regularisation and path-length-free generator (StyleGAN2-lite)."""
import torch
import torch.nn.functional as F


def d_r1_loss(real_pred, real_img):
    (grad_real,) = torch.autograd.grad(real_pred.sum(), real_img, create_graph=True)
    return grad_real.pow(2).flatten(1).sum(1).mean()


def train(netG, netD, loader, z_dim, iters, device, r1_gamma=10.0, d_reg_every=16):
    optG = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.0, 0.99))
    optD = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.0, 0.99))
    sample_z = torch.randn(16, z_dim, device=device)
    snapshots = []
    d_loss_epoch = 0
    loader_iter = iter(loader)
    for it in range(iters):
        try:
            real = next(loader_iter)[0].to(device)
        except StopIteration:
            loader_iter = iter(loader)
            real = next(loader_iter)[0].to(device)
        z = torch.randn(real.size(0), z_dim, device=device)
        fake = netG(z)
        d_loss = F.softplus(netD(fake.detach())).mean() + F.softplus(-netD(real)).mean()
        optD.zero_grad()
        d_loss.backward()
        optD.step()
        d_loss_epoch = d_loss_epoch + d_loss
        if it % d_reg_every == 0:
            real.requires_grad_(True)
            r1 = d_r1_loss(netD(real), real)
            optD.zero_grad()
            (r1_gamma / 2 * r1 * d_reg_every).backward()
            optD.step()
        g_loss = F.softplus(-netD(fake)).mean()
        optG.zero_grad()
        g_loss.backward(retain_graph=True)
        optG.step()
        if it % 1000 == 0:
            snapshots.append(netG(sample_z))
            print(it, float(d_loss_epoch) / (it + 1), g_loss.item())
    return snapshots
