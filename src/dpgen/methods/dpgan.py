"""DP-GAN (Xie et al. 2018) as configured in G-PATE appendix E, and the DP-SGD machinery DP-CGAN shares.

Design: the discriminator alone is private. It is an Opacus `GradSampleModule` (per-sample gradients) whose
optimizer is an Opacus `DPOptimizer` (per-sample clipping to C, Gaussian noise sigma C, division by the
expected batch size). The method draws its own Poisson batches (Opacus `DPDataLoader`, sampling rate
q = batch_size / N, empty batches allowed) from `trainer.datamodule.train_data`; the datamodule's own loader
only drives Lightning's steps and its batches are not used. One Lightning step = `critic_steps` DP-SGD
discriminator steps (one Poisson batch each) + one generator step, so `global_step` counts generator steps.

What is private: the real-data term of the discriminator loss, per sample, through the DPOptimizer. The
fake-data term is a function of the current (already private) discriminator and of public noise only, so how it
enters changes nothing of the privacy argument (`fake_term`):
- "public": its gradient is added unclipped after Opacus has clipped and noised the real part. DP-CGAN's reference
  code (Torkzadehmahani et al. 2019) does not do this: it clips each generated sample's gradient too and noises
  only the records' sum, which is "clipped" below in distribution.
- "clipped": each generated sample's gradient is clipped to C like each record's, in the same Opacus step (the
  noise is the same N(0, (sigma C)^2) on the sum, calibrated to the one record that can change). Under a WGAN loss
  a record's gradient does not shrink as the critic improves, so clipping only the real term scales it down
  against the fake one, and the critic then maximises a E[D(real)] - E[D(fake)] with a < 1, which rewards a
  generator for darker samples; clipping both keeps the two terms alike (DPImageBench passes real and fake
  samples through Opacus together; Xie et al. 2018 clip each (real, fake) pair's gradient together).
The generator step freezes the discriminator, so no gradient is left on it.
"""
from __future__ import annotations

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from torch import nn
from torch.nn.functional import binary_cross_entropy_with_logits as bce

from dpgen.methods.base import PrivateGenerator
from dpgen.methods.dpsgd_parts import (PoissonBatches, dp_optimizer, opacus_ready, private_step_with, public_term,
                                       secret_noise, trainable)
from dpgen.nn.fc import FCDiscriminator, FCGenerator
from dpgen.privacy.cost import dpsgd_step
from dpgen.privacy.dpsgd import noise_multiplier_of
from dpgen.privacy.ledger import NO_DATA_DEPENDENT_BOUND, PrivacyLedger
from dpgen.privacy.rdp import DEFAULT_ORDERS

MECHANISM = "dpsgd_discriminator"

# Discriminator logits -> (real term summed over the Poisson batch, fake term, generator loss). The real term is
# a sum so that an empty batch gives 0 and Opacus sees one gradient per sample; the DPOptimizer divides by the
# expected batch size.
OBJECTIVES = {
    "wgan": (lambda d: -d.sum(), lambda d: d.mean(), lambda d: -d.mean()),  # maximise D(real) - D(fake)
    "bce": (lambda d: bce(d, torch.ones_like(d), reduction="sum"), lambda d: bce(d, torch.zeros_like(d)),
            lambda d: bce(d, torch.ones_like(d))),
}
OPTIMIZERS = {"rmsprop": torch.optim.RMSprop, "sgd": torch.optim.SGD, "adam": torch.optim.Adam}
FAKE_TERMS = ("public", "clipped")


def make_optimizer(net: nn.Module, spec: dict) -> torch.optim.Optimizer:
    spec = dict(spec)
    name = spec.pop("name")
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r} (one of {sorted(OPTIMIZERS)})")
    return OPTIMIZERS[name](net.parameters(), **spec)


class DPSGDGAN(PrivateGenerator):
    """Conditional GAN whose discriminator is trained with DP-SGD (Opacus). `objective`: "wgan" or "bce";
    optimizers by name ("rmsprop", "sgd", "adam") with their keyword arguments."""

    neighbouring = "add_remove"

    pld_ready = True  # every release is one DP-SGD step, recorded with its PLD event

    def __init__(self, shape, num_classes, kind, z_dim: int = 128, batch_size: int = 64,
                 noise_multiplier: float = 1.1, max_grad_norm: float = 1.0, critic_steps: int = 5,
                 objective: str = "wgan", optimizer_g: dict | None = None, optimizer_d: dict | None = None,
                 weight_clip: float | None = None, fake_term: str = "public",
                 generator: dict | None = None, discriminator: dict | None = None, class_probs=None,
                 secure_mode: bool = False, ema_decay: float = 0.0, seed: int = 0):
        super().__init__(shape, num_classes, kind, z_dim=z_dim, generator=generator, class_probs=class_probs,
                         ema_decay=ema_decay)
        self.batch_size, self.critic_steps = int(batch_size), int(critic_steps)
        self.noise_multiplier, self.max_grad_norm = float(noise_multiplier), float(max_grad_norm)
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r} (one of {sorted(OBJECTIVES)})")
        self.real_loss, self.fake_loss, self.generator_loss = OBJECTIVES[objective]
        self.optimizer_g = dict(optimizer_g or {"name": "rmsprop", "lr": 5e-5})
        self.optimizer_d = dict(optimizer_d or {"name": "rmsprop", "lr": 5e-5})
        self.weight_clip = weight_clip
        if fake_term not in FAKE_TERMS:
            raise ValueError(f"unknown fake_term {fake_term!r} (one of {FAKE_TERMS})")
        self.fake_term = fake_term
        self.secure_mode, self.seed = secure_mode, int(seed)
        self.net_d = GradSampleModule(opacus_ready(self.build_discriminator(**(discriminator or {}))),
                                      loss_reduction="sum")
        self.orders = DEFAULT_ORDERS
        self.ledger = PrivacyLedger(self.orders, aliases=NO_DATA_DEPENDENT_BOUND)
        self.sample_rate: float | None = None
        self.dp_optimizer: DPOptimizer | None = None
        self.poisson: PoissonBatches | None = None
        self._step_cost = None

    # nets

    def build_generator(self, arch: str = "fc", **kwargs) -> nn.Module:
        if arch == "fc":
            return FCGenerator(self.shape, self.num_classes, z_dim=self.z_dim, **kwargs)
        if arch == "conv":  # G-PATE's conditional deconvolution generator (its appendix E); a table: PATE-GAN's MLP,
            table = kwargs.pop("table", None)  # or with `table` DP-MERF's drawn categories (base.table_generator)
            return super().build_generator(**(kwargs if self.kind == "image" else {"table": table}))
        raise ValueError(f"unknown generator arch {arch!r} (fc or conv)")

    def build_discriminator(self, arch: str = "fc", **kwargs) -> nn.Module:
        if arch == "fc":
            return FCDiscriminator(self.shape, self.num_classes, **kwargs)
        if arch == "conv":  # the sizes are an image's; a table gets PATE-GAN's MLP (d, d/2, d)
            return self.build_judge("leaky_relu", **(kwargs if self.kind == "image" else {}))
        raise ValueError(f"unknown discriminator arch {arch!r} (fc or conv)")

    # privacy

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.sample_rate = min(1.0, self.batch_size / len(self.trainer.datamodule.train_data))  # N is public

    def on_train_start(self) -> None:
        """Secret sampling and noise streams, fresh on resume (dpsgd_parts.py)."""
        self.poisson = PoissonBatches(self.trainer.datamodule.train_data, self.sample_rate)
        secret_noise(self.dp_optimizer, self.device)

    def configure_optimizers(self):
        opt_g, opt_d = make_optimizer(self.net_g, self.optimizer_g), make_optimizer(self.net_d, self.optimizer_d)
        self.dp_optimizer = dp_optimizer(opt_d, self.noise_multiplier, self.max_grad_norm, self.batch_size,
                                         self.secure_mode)
        return opt_g, self.dp_optimizer

    def accounted_noise_multiplier(self) -> float:
        """As the mechanism runs: the DPOptimizer's noise std over the sensitivity of one record's clipped gradient."""
        opt = self.dp_optimizer
        return noise_multiplier_of(opt.noise_multiplier * opt.max_grad_norm, opt.max_grad_norm)

    def step_cost(self):
        """One generator step: `critic_steps` Poisson-subsampled Gaussian steps (Opacus' RDP analysis)."""
        if self.sample_rate is None or self.dp_optimizer is None:
            return None
        if self._step_cost is None:
            self._step_cost = dpsgd_step(self.sample_rate, self.accounted_noise_multiplier(), self.critic_steps,
                                         self.orders)
        return self._step_cost

    def private_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next Poisson batch (possibly empty)."""
        x, y = self.poisson.next()
        return x.to(self.device), y.to(self.device)

    # training

    def critic_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt = self.dp_optimizer
        with torch.no_grad():
            fake, fake_y = self.generated(self.batch_size)
        opt.zero_grad()
        if self.fake_term == "clipped":  # one Opacus step over records and generated samples, each clipped to C
            d = self.net_d(torch.cat([x, fake.to(x.dtype)]), torch.cat([y, fake_y.to(y.dtype)]))
            real_term, fake_sum = self.real_loss(d[:len(x)]), self.fake_loss(d[len(x):]) * len(fake)
            self.manual_backward(real_term + fake_sum)
            opt.step()
            fake_term = fake_sum / len(fake)
        else:  # the fake term is public given D: plain gradients, no per-sample work
            fake_term, fake_grads = public_term(self.net_d, lambda: self.fake_loss(self.net_d(fake, fake_y)))
            real_term = self.real_loss(self.net_d(x, y))
            self.manual_backward(real_term)
            private_step_with(opt, self.net_d, fake_grads)
        if self.weight_clip is not None:
            with torch.no_grad():
                for p in trainable(self.net_d):
                    p.clamp_(-self.weight_clip, self.weight_clip)
        return (real_term / self.batch_size + fake_term).detach()

    def generator_step(self) -> torch.Tensor:
        # the generator step leaves nothing on the private discriminator
        return self.generator_step_against(self.net_d, self.generator_loss, self.batch_size)

    def training_step(self, batch, batch_idx):
        d_losses = [self.critic_step(*self.private_batch()) for _ in range(self.critic_steps)]
        cost = self.step_cost()
        ((event, _),) = cost.pld_events
        self.ledger.record(MECHANISM, cost.worst, count=self.critic_steps, event=event,
                           params={"sample_rate": self.sample_rate, "noise_multiplier": self.accounted_noise_multiplier(),
                                   "max_grad_norm": self.max_grad_norm})
        g_loss = self.generator_step()
        self.log_losses({"loss/g": g_loss}, private={"loss/d": torch.stack(d_losses).mean()})


class DPGAN(DPSGDGAN):
    """Xie et al. 2018 (G-PATE appendix E): WGAN with RMSProp, discriminator weights clipped to [-0.1, 0.1],
    FC generator [128 (z), 256, 512, 784] and discriminator [784, 64, 64, 1] with 0.5 x ReLU activations
    bounded to [-0.5, 0.5], the one-hot label concatenated to every layer, 5 critic steps per generator step."""

    def __init__(self, shape, num_classes, kind, objective: str = "wgan", weight_clip: float | None = 0.1,
                 critic_steps: int = 5, **kwargs):
        super().__init__(shape, num_classes, kind, objective=objective, weight_clip=weight_clip,
                         critic_steps=critic_steps, **kwargs)
