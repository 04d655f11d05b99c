"""A guide: a small classifier of the private data trained once with DP-SGD, which labels or filters a generator's
samples (method.module.guide of method=dpmerf; docs/methods/dpmerf.md, "The guide"). mode=relabel: each sample
G(z, y) gets the guide's class as its label (`relabel`: its most likely class, or with class shares given, the
classes assigned so that their shares are the released ones, `match_shares`); mode=filter: `GuidedGenerator` draws
G(z, y) again (fresh z, up to `tries` times) for every sample the guide reads as another class than y. Either is a
randomised function of (z, y) and of two released models: post-processing of both."""
from __future__ import annotations

import math
import warnings

import torch
from opacus import GradSampleModule
from opacus.validators import ModuleValidator
from torch import nn
from torch.utils.data import TensorDataset

from dpgen.methods.dpsgd_parts import PoissonBatches, dp_optimizer, secret_noise
from dpgen.nn.generator import latent


MIN_SIZE = 16  # the smallest image guide_cnn's two strided convolutions and pools leave a pixel of
TABLE_HIDDEN = 64  # guide_mlp's tanh units (probed on HI at eps = 1: 32 and 64 units, or none; experiments/dpmerf_guide)


def guide_cnn(shape, num_classes: int) -> nn.Sequential:
    """Tramer & Boneh's (ICLR 2021, Table 9) end-to-end DP-SGD CNN for MNIST: conv 16 8x8 stride 2 -> tanh -> max-pool
    2 stride 1 -> conv 32 4x4 stride 2 -> tanh -> max-pool 2 stride 1 -> dense 32 -> tanh -> dense; tanh because
    bounded activations suit clipped gradients (Papernot et al. 2021). No BatchNorm (it would mix records)."""
    channels, height, width = shape
    if min(height, width) < MIN_SIZE:
        raise ValueError(f"method.module.guide's CNN needs images of at least {MIN_SIZE} x {MIN_SIZE} pixels, "
                         f"got {height} x {width}")
    body = nn.Sequential(nn.Conv2d(channels, 16, 8, stride=2, padding=3), nn.Tanh(), nn.MaxPool2d(2, 1),
                         nn.Conv2d(16, 32, 4, stride=2), nn.Tanh(), nn.MaxPool2d(2, 1), nn.Flatten())
    with torch.no_grad():
        width = body(torch.zeros(1, *shape)).shape[1]
    return nn.Sequential(*body, nn.Linear(width, 32), nn.Tanh(), nn.Linear(32, num_classes))


def guide_mlp(shape, num_classes: int, hidden: int = TABLE_HIDDEN) -> nn.Sequential:
    """The guide of a table: one tanh layer of `hidden` units over the record's columns (tanh for clipped gradients,
    as guide_cnn; no BatchNorm)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), hidden), nn.Tanh(), nn.Linear(hidden, num_classes))


def guide_net(kind: str, shape, num_classes: int) -> nn.Sequential:
    """guide_cnn for images, guide_mlp for tables."""
    return guide_cnn(shape, num_classes) if kind == "image" else guide_mlp(shape, num_classes)


def train_dpsgd(net: nn.Module, x: torch.Tensor, y: torch.Tensor, *, steps: int, batch_size: int, lr: float,
                momentum: float, clip: float, noise_multiplier: float, device=None, log=None,
                on_optimizer=None) -> None:
    """`steps` DP-SGD steps (Abadi et al. 2016, Alg. 1) on `net` in place: Poisson batches at rate batch_size / N
    from secret randomness, each record's gradient of its cross-entropy clipped to `clip`, summed, N(0, (noise_multiplier
    clip)^2) added, divided by the expected batch size (Opacus' DPOptimizer), SGD with momentum. `log(step, loss)`
    every 100 steps (the loss of the noisy batch: for progress only, not released). `on_optimizer(opt, net, rate)` is
    called once before the first step (the audit's canaries, dpgen.audit.canaries.GuideCanaries)."""
    ModuleValidator.validate(net, strict=True)  # no BatchNorm or other layer that mixes records
    wrapped = GradSampleModule(net)
    opt = dp_optimizer(torch.optim.SGD(wrapped.parameters(), lr=lr, momentum=momentum), noise_multiplier, clip,
                       batch_size)
    secret_noise(opt, device)
    rate = batch_size / len(x)
    batches = PoissonBatches(TensorDataset(x, y), rate)
    if on_optimizer is not None:
        on_optimizer(opt, wrapped, rate)
    for step in range(steps):
        bx, by = (t.to(device) for t in batches.next())
        opt.zero_grad()
        # a sum, so that an empty batch gives 0; the optimizer divides by the expected batch size
        loss = nn.functional.cross_entropy(wrapped(bx.float()), by.long(), reduction="sum")
        with warnings.catch_warnings():  # the records need no gradient, which Opacus' hooks warn of every step
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            loss.backward()
        opt.step()
        if log is not None and (step + 1) % 100 == 0:
            log(step + 1, loss.item() / max(len(by), 1))
    wrapped.remove_hooks()  # `net` is left as a plain module
    strip_private_state(net)


def strip_private_state(net: nn.Module) -> None:
    """Deletes what DP-SGD leaves on `net`'s parameters beside their values: Opacus' `grad_sample` (the last batch's
    per-record gradients, neither clipped nor noised), `summed_grad` (their clipped sum, no noise) and the noisy
    `.grad`. A pickled module (generator.pt's labeller) would carry the first two: records of the private data."""
    for param in net.parameters():
        param.grad = None
        for key in list(vars(param)):
            delattr(param, key)


MODES = ("relabel", "filter")
RULES = ("argmax", "shares")  # how mode=relabel labels: the guide's most likely class, or `match_shares`


@torch.no_grad()
def relabel(guide: nn.Module, x: torch.Tensor, batch_size: int = 1000,
            shares: list[float] | None = None) -> torch.Tensor:
    """The labels of a relabelled synthetic data set (method.module.guide.mode=relabel): each record of `x` gets the
    guide's most likely class (the guide on its device, in batches), or, with class `shares`, the class that
    `match_shares` assigns from the guide's probabilities."""
    device = next(guide.parameters(), torch.empty(0)).device
    logits = torch.cat([guide(chunk.to(device)).cpu() for chunk in x.split(batch_size)])
    return logits.argmax(1) if shares is None else match_shares(logits.softmax(1), shares)


def quotas(shares: list[float], n: int) -> list[int]:
    """n split into whole counts in proportion to `shares` (normalised), the remainder to the largest fractional
    parts (ties to the lower class)."""
    share = torch.as_tensor(shares, dtype=torch.float64)
    if share.dim() != 1 or not (share >= 0).all() or not share.sum() > 0:
        raise ValueError(f"class shares must be non-negative with a positive sum, got {shares}")
    exact = share / share.sum() * n
    counts = exact.floor().long()
    order = sorted(range(len(shares)), key=lambda c: (-(exact[c] - counts[c]).item(), c))
    for c in order[:n - int(counts.sum())]:
        counts[c] += 1
    return counts.tolist()


def match_shares(probs: torch.Tensor, shares: list[float]) -> torch.Tensor:
    """Labels for the n rows of `probs` (n, K) whose class counts are `quotas(shares, n)`: the (record, class) pairs
    taken in order of probability, highest first, each record labelled by its first pair whose class has room left.
    Where the most likely classes already fill the quotas this is the argmax; with two classes, the records of
    highest probability of class 1 are class 1. A guide that reads every record as the common class of a table
    thus still ranks them: its labels keep the release's class shares instead of collapsing to one class."""
    n, k = probs.shape
    if len(shares) != k:
        raise ValueError(f"{len(shares)} class shares for a guide of {k} classes")
    room = quotas(shares, n)
    labels, left = [-1] * n, n
    for pair in torch.argsort(probs.flatten(), descending=True, stable=True).tolist():
        record, c = divmod(pair, k)
        if labels[record] < 0 and room[c] > 0:
            labels[record], room[c], left = c, room[c] - 1, left - 1
            if left == 0:
                break
    return torch.tensor(labels, dtype=torch.long)


class GuidedGenerator(nn.Module):
    """G(z, y), each sample that `guide` reads as another class drawn again with a fresh z (from `latent`), up to
    `tries` draws in all; what is still rejected after them is kept as drawn last. The guide (guide_cnn) has no
    BatchNorm or dropout, so its train / eval mode does not matter."""

    def __init__(self, net: nn.Module, guide: nn.Module, latent_dist: str, tries: int):
        super().__init__()
        if int(tries) < 1:
            raise ValueError(f"guide tries must be >= 1, got {tries}")
        self.net, self.guide, self.latent_dist, self.tries = net, guide, latent_dist, int(tries)

    @torch.no_grad()
    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = self.net(z, y)
        todo = self.guide(x).argmax(1) != y
        for _ in range(self.tries - 1):
            if not todo.any():
                break
            idx = todo.nonzero().squeeze(1)
            redrawn = self.net(latent(len(idx), z.shape[1], self.latent_dist, z.device), y[idx])
            x[idx] = redrawn
            todo[idx] = self.guide(redrawn).argmax(1) != y[idx]
        return x
