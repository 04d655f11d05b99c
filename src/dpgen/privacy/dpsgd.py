"""DP-SGD: the Poisson-subsampled Gaussian mechanism, accounted by Opacus (never re-derived here)."""

from __future__ import annotations

import numpy as np

from .rdp import as_orders


def rdp_subsampled_gaussian(q: float, noise_multiplier: float, steps: int, orders) -> np.ndarray:
    """RDP of `steps` DP-SGD steps with sampling rate q and noise std noise_multiplier * clip norm
    (Mironov, Talwar & Zhang 2019, as implemented by opacus.accountants.analysis.rdp.compute_rdp)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"sample rate must be in [0, 1], got {q}")
    if not noise_multiplier > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps}")
    # imported here: opacus loads torch (seconds), which nothing else in privacy/ needs
    from opacus.accountants.analysis.rdp import compute_rdp

    orders = as_orders(orders)
    rdp = compute_rdp(q=float(q), noise_multiplier=float(noise_multiplier), steps=int(steps), orders=list(orders))
    return np.asarray(rdp, dtype=float)
