"""DP-SGD: the Poisson-subsampled Gaussian mechanism, accounted by Opacus (never re-derived here)."""

from __future__ import annotations

import numpy as np

from .rdp import as_orders


def check_sampled_gaussian(q: float, noise_multiplier: float, steps: int) -> None:
    """Clear errors for the parameters of `steps` subsampled Gaussian steps."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"sample rate must be in [0, 1], got {q}")
    if not noise_multiplier > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps}")


def rdp_subsampled_gaussian(q: float, noise_multiplier: float, steps: int, orders) -> np.ndarray:
    """RDP of `steps` DP-SGD steps with sampling rate q and noise std noise_multiplier * clip norm
    (Mironov, Talwar & Zhang 2019, as implemented by opacus.accountants.analysis.rdp.compute_rdp)."""
    check_sampled_gaussian(q, noise_multiplier, steps)
    # imported here: opacus loads torch (seconds), which nothing else in privacy/ needs
    from opacus.accountants.analysis.rdp import compute_rdp

    orders = as_orders(orders)
    rdp = compute_rdp(q=float(q), noise_multiplier=float(noise_multiplier), steps=int(steps), orders=list(orders))
    return np.asarray(rdp, dtype=float)


def noise_multiplier_of(noise_std: float, sensitivity: float) -> float:
    """The noise multiplier the accountant needs: the Gaussian's std divided by the L2 sensitivity of what it
    is added to. DP-SGD clips per-sample gradients to C and adds N(0, (sigma C)^2), so this is sigma; the
    public DP-CGAN script passes sigma * C instead, which understates epsilon whenever C > 1."""
    if not noise_std > 0 or not sensitivity > 0:
        raise ValueError(f"noise std and sensitivity must be > 0, got {noise_std}, {sensitivity}")
    return float(noise_std) / float(sensitivity)

