"""PATE-GAN's 2018 public code (PATE_GAN.py by its authors, dated 2018, which the PATE-GAN audit of Ganev,
Annamalai and De Cristofaro keeps as the code behind the paper), reproduced as a named option because it departs
from the paper's privacy argument: it has no differential-privacy guarantee, and every run's privacy.json says so.

What that code does per iteration: `critic_steps` (its `num_teachers`) WGAN-GP steps of ONE critic, each on
`batch_size` records drawn from the whole training set against as many generated samples, with the real / fake
targets M flipped by Gaussian noise (M + N(0, lamda^2) > 0.5); then one generator step on -mean D(G(z, y)). It has
no teachers on disjoint partitions, no vote and no student (the paper's Algorithm 1 is methods/pategan.py): the
critic reads the records directly and unnoised at every step, so nothing bounds what the generator learns of one
record; the noise only flips real / fake targets. Its epsilon enters only through
lamda = sqrt(2 ln(1.25 (10 XOR delta))) / epsilon, `^` on the integer delta = 5 (the code's default) being
Python's XOR (the code's own comment flags the line as a bug): lamda = 2.42 / epsilon.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from dpgen.methods.base import PrivateGenerator
from dpgen.nn.fc import FCDiscriminator, FCGenerator

NO_GUARANTEE = ("method=pategan_2018_code reproduces PATE-GAN's 2018 public code, which departs from the paper's "
                "privacy argument: one WGAN-GP critic reads records from the whole training set, unnoised, at every "
                "step, and Gaussian noise flips only its real / fake targets. No differential privacy guarantee "
                "holds for the generator; `claimed_epsilon` is the epsilon the code's label-noise formula was given, "
                "not a bound (docs/methods/pategan.md).")


def code_label_noise(epsilon: float, delta: int = 5) -> float:
    """The 2018 code's lamda = sqrt(2 ln(1.25 * (10 ^ delta))) / epsilon, with `^` Python's XOR on the integer
    delta as in that code (10 ^ 5 = 15: lamda = 2.4212 / epsilon)."""
    if not epsilon > 0:
        raise ValueError(f"the code's epsilon must be > 0, got {epsilon}")
    return math.sqrt(2 * math.log(1.25 * (10 ^ int(delta)))) / epsilon


def noisy_targets(n: int, label_noise: float, generator: torch.Generator | None = None,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """The 2018 code's targets of one critic step: n ones (records) then n zeros (generated samples), each plus
    N(0, label_noise^2), thresholded at 0.5 (float 0 / 1)."""
    clean = torch.cat([torch.ones(n, device=device), torch.zeros(n, device=device)])
    if not label_noise:
        return clean
    return (clean + label_noise * torch.randn(2 * n, generator=generator, device=device) > 0.5).float()


def code_init(net: nn.Module) -> None:
    """The code's `xavier_init`: weights N(0, 2 / fan_in) (stddev 1 / sqrt(fan_in / 2)), biases 0."""
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, math.sqrt(2.0 / m.in_features))
                m.bias.zero_()


class PATEGAN2018Code(PrivateGenerator):
    """The 2018 code's loop with its nets and settings: G [z (X_dim / 4, U(-1, 1)), y] -> X_dim tanh -> X_dim tanh ->
    X_dim sigmoid; D [x, y] -> X_dim ReLU -> X_dim ReLU -> 1 (X_dim the number of features, 784 for MNIST); Adam
    lr 1e-4, beta1 0.5 for both; batches of 128; gradient penalty 10 on random interpolates of the records and the
    generated samples. The critic loss is mean((1 - M) D) - mean(M D) + penalty over the 2B samples, M the noisy
    targets (`noisy_targets`); each critic step's generated samples take its records' labels, as in the code. Two
    departures: the label enters as a one-hot vector (the code has one scalar label column, for binary tables), and
    the generator step draws uniform labels (the code draws training records' labels). The datamodule's batch of
    `critic_steps x batch_size` records is split into one chunk per critic step.

    code_epsilon: the epsilon passed to the code's label-noise formula (`code_label_noise`); label_noise, when
    given, replaces that formula's lamda (0: no label noise, the noise-free control)."""

    def __init__(self, shape, num_classes, kind, code_epsilon: float = 1.0, delta_exponent: int = 5,
                 label_noise: float | None = None, critic_steps: int = 5, batch_size: int = 128,
                 gp_weight: float = 10.0, lr: float = 1e-4, beta1: float = 0.5, hidden: int | None = None,
                 z_dim: int | None = None, **kwargs):
        if min(critic_steps, batch_size) < 1:
            raise ValueError(f"critic_steps and batch_size must be >= 1, got {critic_steps}, {batch_size}")
        if label_noise is not None and label_noise < 0:
            raise ValueError(f"label_noise is a standard deviation >= 0, got {label_noise}")
        features = math.prod(shape)
        width = int(hidden or features)
        super().__init__(shape, num_classes, kind, z_dim=int(z_dim or max(features // 4, 1)),
                         generator={"hidden": (width, width)}, **kwargs)
        self.code_epsilon, self.delta_exponent = float(code_epsilon), int(delta_exponent)
        self.label_noise_from_formula = label_noise is None
        self.label_noise = code_label_noise(code_epsilon, delta_exponent) if label_noise is None else float(label_noise)
        self.critic_steps, self.batch_size = int(critic_steps), int(batch_size)
        self.gp_weight, self.lr, self.beta1 = float(gp_weight), lr, beta1
        self.net_d = FCDiscriminator(self.shape, self.num_classes, hidden=(width, width), activation="relu",
                                     feature_bound=None, label_every_layer=False)
        code_init(self.net_g)
        code_init(self.net_d)

    def build_generator(self, hidden: tuple[int, int]) -> nn.Module:
        return FCGenerator(self.shape, self.num_classes, z_dim=self.z_dim, hidden=hidden, activation="tanh",
                           feature_bound=None, label_every_layer=False)

    def configure_optimizers(self):
        betas = (self.beta1, 0.999)
        return (torch.optim.Adam(self.net_g.parameters(), lr=self.lr, betas=betas),
                torch.optim.Adam(self.net_d.parameters(), lr=self.lr, betas=betas))

    @property
    def privacy_claim(self) -> dict:
        """What privacy.json records for this method: the code's claim and why it is none."""
        claimed = self.code_epsilon if self.label_noise_from_formula else None  # a given label_noise claims nothing
        return {"guarantee": "none", "claimed_epsilon": claimed,
                "claimed_delta": f"10 ^ {self.delta_exponent} in the code's formula (XOR)",
                "label_noise": self.label_noise, "caveats": [NO_GUARANTEE]}

    def critic_loss(self, x: torch.Tensor, y: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        """One critic step's loss: the noisy-target Wasserstein term over [records, generated] plus the penalty
        gp_weight * mean((|grad_x D(x_mix, y)| - 1)^2), |.| = sqrt(sum(g^2 + 1e-8)) as in the code."""
        n = len(y)
        scores = self.net_d(torch.cat([x, fake]), torch.cat([y, y]))
        m = noisy_targets(n, self.label_noise, device=x.device)
        alpha = torch.rand(n, *[1] * (x.dim() - 1), device=x.device)
        mixed = (alpha * x + (1 - alpha) * fake).requires_grad_(True)
        (slopes,) = torch.autograd.grad(self.net_d(mixed, y).sum(), mixed, create_graph=True)
        norm = (slopes.flatten(1).pow(2) + 1e-8).sum(1).sqrt()
        return ((1 - m) * scores).mean() - (m * scores).mean() + self.gp_weight * (norm - 1).pow(2).mean()

    def training_step(self, batch, batch_idx):
        x, y = batch
        b = self.batch_size
        if len(y) < self.critic_steps * b:
            raise ValueError(f"a batch of {len(y)} records cannot feed {self.critic_steps} critic steps of {b}: "
                             "method.batch_size must be critic_steps x module.batch_size")
        opt_d = self.optimizers()[1]  # the generator's is the first, taken by generator_step_against
        for i in range(self.critic_steps):
            xi, yi = x[i * b:(i + 1) * b], y[i * b:(i + 1) * b]
            with torch.no_grad():
                fake = self.net_g(self.latent(b), yi)
            d_loss = self.critic_loss(xi, yi, fake)
            opt_d.zero_grad()
            self.manual_backward(d_loss)
            opt_d.optimizer.step()  # the raw optimizer: global_step counts generator steps only
        g_loss = self.generator_step_against(self.net_d, lambda s: -s.mean(), b)
        self.log_dict({"loss/d": d_loss.detach(), "loss/g": g_loss}, prog_bar=True)
