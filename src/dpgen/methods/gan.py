"""Non-private conditional GAN: the upper bound of every table (G-PATE appendix E, "GAN")."""
from __future__ import annotations

import torch
from torch.nn.functional import binary_cross_entropy_with_logits as bce

from dpgen.methods.base import PrivateGenerator


class GAN(PrivateGenerator):
    """G-PATE appendix E: same nets as G-PATE with a single discriminator on all the data, Adam lr 1e-3."""

    def __init__(self, shape, num_classes, kind, z_dim: int = 100, lr: float = 1e-3, beta1: float = 0.5,
                 generator: dict | None = None, discriminator: dict | None = None, **kwargs):
        super().__init__(shape, num_classes, kind, z_dim=z_dim, generator=generator, **kwargs)
        self.lr, self.beta1 = lr, beta1
        self.net_d = self.build_judge("leaky_relu", **(discriminator or {}))

    def configure_optimizers(self):
        betas = (self.beta1, 0.999)
        return (torch.optim.Adam(self.net_g.parameters(), lr=self.lr, betas=betas),
                torch.optim.Adam(self.net_d.parameters(), lr=self.lr, betas=betas))

    def training_step(self, batch, batch_idx):
        x, y = batch
        opt_g, opt_d = self.optimizers()
        fake = self.net_g(self.latent(len(y)), y)
        real_logit, fake_logit = self.net_d(x, y), self.net_d(fake.detach(), y)
        d_loss = bce(real_logit, torch.ones_like(real_logit)) + bce(fake_logit, torch.zeros_like(fake_logit))
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.optimizer.step()  # the raw optimizer, so that global_step counts generator steps only
        gen_logit = self.net_d(fake, y)
        g_loss = bce(gen_logit, torch.ones_like(gen_logit))
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.update_ema()
        self.log_dict({"loss/d": d_loss.detach(), "loss/g": g_loss.detach()}, prog_bar=True)
