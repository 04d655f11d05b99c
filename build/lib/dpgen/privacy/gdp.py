"""Gaussian differential privacy (Dong, Roth & Su 2022), used by PATE-TripleGAN."""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr

from .dpsgd import check_sampled_gaussian
from .rdp import check_delta


def _check_mu(mu: float) -> float:
    mu = float(mu)
    if not mu >= 0:
        raise ValueError(f"mu must be >= 0, got {mu}")
    return mu


def mu_gaussian(sensitivity: float, sigma: float) -> float:
    """The Gaussian mechanism with L2 sensitivity s and noise std sigma is (s / sigma)-GDP (Dong et al. Thm. 2.7)."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if not sensitivity > 0:
        raise ValueError(f"sensitivity must be > 0, got {sensitivity}")
    return float(sensitivity) / float(sigma)


def compose(mus) -> float:
    """mu_1-GDP composed with ... mu_k-GDP is sqrt(sum mu_i^2)-GDP (Dong et al. Cor. 3.3)."""
    mus = np.asarray(mus, dtype=float)
    if np.any(mus < 0):
        raise ValueError("mu must be >= 0")
    return float(np.sqrt(np.sum(mus**2)))


def mu_poisson_clt(q: float, noise_multiplier: float, steps: int) -> float:
    """Bu et al. 2020 (Cor. 4 / eq. 6): T Poisson-subsampled Gaussian steps are asymptotically
    mu-GDP with mu = q sqrt(T (e^{1/sigma^2} - 1)). A central-limit approximation, not a bound."""
    check_sampled_gaussian(q, noise_multiplier, steps)
    return float(q * np.sqrt(steps * np.expm1(1.0 / noise_multiplier**2)))


def delta_from_gdp(mu: float, epsilon: float) -> float:
    """mu-GDP is (eps, delta(eps))-DP for all eps >= 0 with
    delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)   (Dong et al. Cor. 2.13)."""
    mu = _check_mu(mu)
    if mu == 0.0:
        return 0.0
    first = ndtr(-epsilon / mu + mu / 2)
    second = np.exp(epsilon + log_ndtr(-epsilon / mu - mu / 2))
    return float(max(first - second, 0.0))


def eps_from_gdp(mu: float, delta: float) -> float:
    """Smallest eps >= 0 with delta_from_gdp(mu, eps) <= delta (delta is decreasing in eps)."""
    mu = _check_mu(mu)
    delta = check_delta(delta)
    if delta_from_gdp(mu, 0.0) <= delta:
        return 0.0
    high = max(1.0, mu)
    while delta_from_gdp(mu, high) > delta:
        high *= 2.0
    return float(brentq(lambda e: delta_from_gdp(mu, e) - delta, 0.0, high, xtol=1e-12, rtol=1e-12))
