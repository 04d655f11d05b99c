"""What DP-GAN / DP-CGAN and PATE-TripleGAN share to train one net with DP-SGD (Opacus): a net whose gradients
Opacus can clip record by record, secret Poisson batches, and a public loss term added after the private one
was clipped and noised (`fake_term=public`, methods/dpgan.py)."""
from __future__ import annotations

from typing import Callable

import torch
from opacus.data_loader import DPDataLoader
from opacus.optimizers import DPOptimizer
from opacus.validators import ModuleValidator
from torch import nn
from torch.utils.data import Dataset

from dpgen.aggregation.noise import secret_generator


def opacus_ready(net: nn.Module) -> nn.Module:
    """BatchNorm mixes records, so per-record clipping would not bound one record's influence: Opacus replaces
    it by GroupNorm (and anything else it cannot handle), then checks the result."""
    net = ModuleValidator.fix(net)
    ModuleValidator.validate(net, strict=True)
    return net


class PoissonBatches:
    """Endless Poisson batches of `dataset` (each record in with probability `sample_rate`, so a batch may be
    empty), drawn from the OS's entropy (aggregation/noise.py): not derivable from the published seed, and
    fresh after a resume, so no subset is replayed."""

    def __init__(self, dataset: Dataset, sample_rate: float):
        self.loader = DPDataLoader(dataset, sample_rate=sample_rate, generator=secret_generator())
        self.batches = None

    def next(self):
        """The next batch; a new pass over the data when one ends."""
        batch = next(self.batches, None) if self.batches is not None else None
        if batch is None:
            self.batches = iter(self.loader)
            batch = next(self.batches)
        return batch


def trainable(net: nn.Module) -> list[nn.Parameter]:
    return [p for p in net.parameters() if p.requires_grad]


def public_term(net: nn.Module, loss: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, list]:
    """`loss()` computed through the Opacus-wrapped `net` without per-sample gradients (it reads no private
    record), and its plain gradients for `trainable(net)` (None for a parameter it does not use)."""
    net.disable_hooks()
    try:
        value = loss()
        grads = torch.autograd.grad(value, trainable(net), allow_unused=True)
    finally:
        net.enable_hooks()
    return value, list(grads)


def clipped_public_sum(net: nn.Module, losses: torch.Tensor, c: float) -> list:
    """The sum over public samples of each one's gradient of `losses` (one loss per sample, computed through the
    Opacus-wrapped `net`), clipped to norm c by Opacus' factor min(1, c / (norm + 1e-6)); the gradients this
    leaves on `net` are cleared. One list entry per `trainable(net)` parameter."""
    params = trainable(net)
    losses.sum().backward()
    per_sample = [p.grad_sample for p in params]
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in per_sample], 1).norm(dim=1)
    factor = (c / (norms + 1e-6)).clamp(max=1.0)
    sums = [torch.einsum("i,i...->...", factor, g) for g in per_sample]
    for p in params:
        p.grad = p.grad_sample = None
    return sums


def private_step_with(opt: DPOptimizer, net: nn.Module, public_grads: list) -> None:
    """After the private term's backward: Opacus clips each record's gradient, sums, adds N(0, (sigma C)^2) and
    divides by the expected batch size; then the public gradients are added and the optimizer steps."""
    if opt.pre_step():
        for p, g in zip(trainable(net), public_grads):
            if g is not None:
                p.grad.add_(g)
        opt.original_optimizer.step()


def dp_optimizer(optimizer: torch.optim.Optimizer, noise_multiplier: float, max_grad_norm: float,
                 batch_size: int, secure_mode: bool = False) -> DPOptimizer:
    """Opacus' DPOptimizer over a mean of per-record losses of Poisson batches with `batch_size` expected records."""
    return DPOptimizer(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                       expected_batch_size=batch_size, loss_reduction="mean", secure_mode=secure_mode)


def secret_noise(opt: DPOptimizer, device) -> None:
    """The DP-SGD noise from the OS's entropy, fresh after a resume (Opacus' secure_mode uses its own source)."""
    if not opt.secure_mode:
        opt.generator = secret_generator(device)
