"""G-PATE (NeurIPS 2021): a student generator taught by an ensemble of teacher discriminators through DPGradAgg."""
from __future__ import annotations

import numpy as np
import torch
from torch.nn.functional import mse_loss

from dpgen.aggregation.dpgradagg import DPGradAggParams, dp_grad_agg, worst_case_rdp
from dpgen.aggregation.noise import secret_generator
from dpgen.methods.base import PrivateGenerator
from dpgen.nn.ensemble import TeacherEnsemble
from dpgen.privacy.ledger import PrivacyLedger
from dpgen.privacy.rdp import DEFAULT_ORDERS


class GPATE(PrivateGenerator):
    """G-PATE Algorithm 1. Per iteration: one fake batch G(z, y) shared by all teachers; every teacher takes
    one Adam step on its own partition's batch against it; each teacher's gradient of its generator loss
    w.r.t. every fake sample goes through DPGradAgg (Algorithm 2); the generator takes one Adam step on the
    MSE between G(z) and G(z) + the private gradient (equation 2)."""

    def __init__(self, shape, num_classes, kind, n_teachers: int, z_dim: int = 100, lr: float = 1e-3,
                 beta1: float = 0.5, aggregator: dict | None = None, teachers: dict | None = None,
                 generator: dict | None = None, class_probs=None, seed: int = 0):
        super().__init__(shape, num_classes, kind, z_dim=z_dim, generator=generator, class_probs=class_probs)
        self.lr, self.beta1, self.n_teachers = lr, beta1, int(n_teachers)
        self.agg = DPGradAggParams(**(aggregator or {}))
        self.ensemble = TeacherEnsemble(self.n_teachers, self.shape, self.num_classes, seed=seed, **(teachers or {}))
        self.orders = np.asarray(DEFAULT_ORDERS, dtype=float)
        self.ledger = PrivacyLedger(self.orders)
        self.fake_batch = None  # per-teacher real batch size, learnt from the first batch
        self.noise = None  # secret randomness of DPGradAgg (aggregation/noise.py), made on the training device

    def configure_optimizers(self):
        return torch.optim.Adam(self.net_g.parameters(), lr=self.lr, betas=(self.beta1, 0.999))

    def step_cost_bound(self):
        if self.fake_batch is None:
            return None
        # Worst case known in advance; the data-dependent cost is known after the step (PrivacyBudget rolls back).
        return {"data_independent": worst_case_rdp(self.agg, self.fake_batch * self.agg.proj_dim, self.orders)}

    def training_step(self, batch, batch_idx):
        real_x, real_y = batch  # (teachers, b, *shape), each row from that teacher's partition only
        b = real_x.shape[1]
        self.fake_batch = b
        fake_y = torch.randint(0, self.num_classes, (b,), device=self.device) if self.class_probs is None \
            else torch.multinomial(self.class_probs.to(self.device), b, replacement=True)
        fake = self.net_g(self.latent(b), fake_y)
        d_loss = self.ensemble.train_step(real_x, real_y, fake.detach(), fake_y)
        # Delta x = dL_D/dx (equation 1): minus the gradient of the generator loss BCE(D(x), 1), i.e. the
        # direction that makes the fake look more real to each teacher (the reference negates it too).
        grads = -self.ensemble.input_grads(fake.detach(), fake_y)  # (teachers, b, dim)
        if self.noise is None or self.noise.device != grads.device:
            self.noise = secret_generator(grads.device)
        private, release = dp_grad_agg(grads, self.agg, self.orders, self.noise)
        self.ledger.record("confident_gnmax", release.rdp, count=len(release.answered),
                           params={"sigma1": self.agg.sigma1, "sigma2": self.agg.sigma2,
                                   "threshold": self.agg.threshold * self.n_teachers,
                                   "n_teachers": self.n_teachers})
        target = (fake + private.view_as(fake)).detach()  # x_hat = G(z) + x_priv (Algorithm 1 line 16)
        # Equation 2 as the reference computes it: a SUM of squares. A mean over b*784 elements makes the
        # weight gradients ~1e-9, the size of Adam's epsilon, which all but stops the generator.
        g_loss = mse_loss(fake, target, reduction="sum")
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(g_loss)
        opt.step()
        self.log_dict({"loss/d_teachers": d_loss.mean(), "loss/g": g_loss.detach(),
                       "answered": float(release.answered.mean())}, prog_bar=True)
