"""DP-MERF's private channel (Harder, Adamczewski & Park, AISTATS 2021): one Gaussian release of the class-conditional
random Fourier feature embedding of the whole private training set. Everything a generator learns afterwards is
computed from this release alone (post-processing).

What is released: S = sum over records (x, y) of v(x, y) + N(0, sigma^2 I), where v(x, y) is the (K, D + 1) matrix
whose row y is [phi(x), a] and whose other rows are 0 (phi: D random Fourier features of norm exactly 1, a: a
public constant). Column D of S is a times the per-class counts, so one mechanism releases sums and counts, and the
class means are S[c, :D] / (S[c, D] / a), post-processing of S (no public N is assumed).

Sensitivity (add/remove one record, docs/methods/dpmerf.md): S changes by exactly v(x, y), of L2 norm
sqrt(|phi(x)|^2 + a^2) = sqrt(1 + a^2) for every record, so Delta = sqrt(1 + a^2), attained by every record."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from dpgen.aggregation.noise import secret_generator
from dpgen.privacy.cost import StepCost
from dpgen.privacy.gdp import mu_gaussian
from dpgen.privacy.ledger import GDP_EXTRA, NO_DATA_DEPENDENT_BOUND, PrivacyLedger

MECHANISM = "gaussian_mean_embedding"


class RandomFourierFeatures(nn.Module):
    """phi(x) = [cos(W x), sin(W x)] / sqrt(D / 2) for flattened x: random Fourier features (Rahimi & Recht 2007) in
    the cos / sin pair form of DP-MERF's code, so |phi(x)|^2 = sum_j (cos^2 + sin^2) / (D / 2) = 1 exactly for every x.

    One bandwidth l: W (D / 2, dim) ~ N(0, 1 / l^2) i.i.d., the Gaussian kernel exp(-|x - x'|^2 / (2 l^2)).
    Several bandwidths l_1..l_J: frequency row i is drawn with l_(i mod J), i.e. from the equal mixture of the J
    spectral densities, which by Bochner's theorem gives the mean of the J Gaussian kernels (a kernel that sees
    coarse and fine structure at once); the norm is still exactly 1, so the release's sensitivity is unchanged.
    W is drawn from `seed` alone (public, data-independent) and is not saved: the same seed gives the same W."""

    def __init__(self, dim: int, n_features: int, bandwidth: float | Sequence[float], seed: int):
        super().__init__()
        bandwidths = (float(bandwidth),) if isinstance(bandwidth, (int, float)) else tuple(map(float, bandwidth))
        if n_features < 2 or n_features % 2 or not bandwidths or not all(b > 0 for b in bandwidths):
            raise ValueError(f"need an even n_features >= 2 and bandwidths > 0, got {n_features}, {bandwidth}")
        self.n_features, self.seed = int(n_features), int(seed)
        self.bandwidth = bandwidths[0] if len(bandwidths) == 1 else list(bandwidths)  # as configured, for records
        scale = torch.tensor(bandwidths).repeat(n_features // 2 // len(bandwidths) + 1)[:n_features // 2]
        w = torch.randn(n_features // 2, dim, generator=torch.Generator().manual_seed(self.seed)) / scale[:, None]
        self.register_buffer("w", w, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wx = x.flatten(1).to(self.w.dtype) @ self.w.T
        # a row with a non-finite input or product (inf, NaN, or overflow) maps to phi(0) = [1, .., 1, 0, .., 0] /
        # sqrt(D / 2), a fixed public unit vector, so that |phi(x)| = 1 holds for every input (the sensitivity)
        wx = torch.where(wx.isfinite().all(1, keepdim=True), wx, torch.zeros_like(wx))
        return torch.cat([wx.cos(), wx.sin()], 1) / math.sqrt(self.n_features / 2)


def sensitivity(a: float) -> float:
    """L2 norm of one record's v(x, y) = [phi(x), a] in row y: sqrt(|phi(x)|^2 + a^2) = sqrt(1 + a^2) (module doc)."""
    return math.sqrt(1.0 + float(a) ** 2)


def embedding_sums(chunks: Iterable[tuple[torch.Tensor, torch.Tensor]], features: nn.Module,
                   num_classes: int, a: float) -> torch.Tensor:
    """sum over records of v(x, y) (module doc), without noise: (K, D + 1) float64, one pass over `chunks` of
    (x, y) batches (each record in exactly one chunk), one matmul per chunk. `features`: RandomFourierFeatures or
    any map of aggregation/feature_maps.py (rows of norm exactly 1 as well)."""
    reference = next(iter(features.buffers()))  # the map's random draws: its device and dtype
    device = reference.device
    sums = torch.zeros(num_classes, features.n_features + 1, dtype=torch.float64, device=device)
    for x, y in chunks:
        onehot = nn.functional.one_hot(y.to(device).long(), num_classes).to(reference.dtype)
        if hasattr(features, "class_sums"):  # a map whose rows are long sums them per class itself (feature_maps.py)
            sums[:, :-1] += features.class_sums(x.to(device), onehot).double()
        else:
            sums[:, :-1] += (onehot.T @ features(x.to(device))).double()
        sums[:, -1] += a * onehot.sum(0).double()
    return sums


def step_cost(a: float, sigma: float, orders) -> StepCost:
    """The one release (mu-GDP, upfront, mu = sensitivity(a) / sigma) and training steps that cost nothing, as
    PrivacyBudget and the planner price a DP-MERF run."""
    return StepCost({GDP_EXTRA: 0.0}, orders, aliases=NO_DATA_DEPENDENT_BOUND,
                    upfront={GDP_EXTRA: mu_gaussian(sensitivity(a), sigma)})


@dataclass
class EmbeddingRelease:
    """The released (K, D + 1) noisy sums and what it spent: one Gaussian release, mu = sensitivity / sigma GDP."""

    sums: torch.Tensor
    a: float
    sigma: float

    @property
    def sensitivity(self) -> float:
        return sensitivity(self.a)

    @property
    def mu(self) -> float:
        """The Gaussian mechanism is exactly (Delta / sigma)-GDP (Dong et al. 2022, Thm. 2.7)."""
        return mu_gaussian(self.sensitivity, self.sigma)

    def record(self, ledger: PrivacyLedger, params: dict | None = None) -> None:
        """Its ledger entry: one mu-GDP release."""
        ledger.record_gdp(MECHANISM, self.mu, count=1, params={"sigma": self.sigma, "sensitivity": self.sensitivity,
                                                                "a": self.a, **(params or {})})

    def class_means(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Post-processing: (K, D) class mean embeddings S[c, :D] / n_c and (K,) counts n_c = S[c, D] / a, the
        counts floored at 1 (a noisy count can be <= 0 for a small class)."""
        counts = (self.sums[:, -1] / self.a).clamp(min=1.0)
        return self.sums[:, :-1] / counts[:, None], counts


def release(chunks: Iterable[tuple[torch.Tensor, torch.Tensor]], features: nn.Module, num_classes: int,
            a: float, sigma: float) -> EmbeddingRelease:
    """The one release: embedding_sums + N(0, sigma^2) on each of its K (D + 1) entries, the noise from the OS's
    entropy (aggregation/noise.py). `sigma` is calibrated by the caller (privacy/gaussian.py)."""
    if not a > 0 or not sigma > 0:
        raise ValueError(f"need a > 0 and sigma > 0, got a={a}, sigma={sigma}")
    sums = embedding_sums(chunks, features, num_classes, a)
    noise = torch.randn(sums.shape, generator=secret_generator(), dtype=torch.float64)
    return EmbeddingRelease(sums + sigma * noise.to(sums.device), float(a), float(sigma))
