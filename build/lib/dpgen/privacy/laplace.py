"""Laplace mechanism for a released statistic (G-PATE's private class ratio on Kaggle Credit)."""

from __future__ import annotations

import numpy as np

from .rdp import as_orders


def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """Scale b = sensitivity / epsilon gives pure epsilon-DP (Dwork & Roth 2014, Thm. 3.6)."""
    if not sensitivity > 0:
        raise ValueError(f"sensitivity must be > 0, got {sensitivity}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    return float(sensitivity) / float(epsilon)


def release(value, sensitivity: float, epsilon: float, rng: np.random.Generator):
    """value + Lap(sensitivity / epsilon): an epsilon-DP release of a statistic with that L1 sensitivity."""
    value = np.asarray(value, dtype=float)
    noisy = value + rng.laplace(0.0, laplace_scale(sensitivity, epsilon), size=value.shape)
    return float(noisy) if noisy.ndim == 0 else noisy


def rdp_laplace(epsilon: float, orders) -> np.ndarray:
    """Exact RDP of the Laplace mechanism with scale = sensitivity / epsilon (Mironov 2017, Table II):
    D_a = log(a/(2a-1) e^{(a-1) eps} + (a-1)/(2a-1) e^{-a eps}) / (a - 1), always <= eps."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    a = as_orders(orders)
    return np.logaddexp(
        np.log(a / (2 * a - 1)) + (a - 1) * epsilon, np.log((a - 1) / (2 * a - 1)) - a * epsilon
    ) / (a - 1)
