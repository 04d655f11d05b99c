"""PATE-GAN's Laplace PATE and its moments accountant (PATE-GAN appendix Theorem 5, i.e. Papernot et al.
2017 Theorems 2-3 and Lemma 4).

`lam` is the INVERSE scale of the Laplace noise: each vote count gets Lap(1 / lam) noise, and one query
is (2 lam, 0)-DP. (PATE-GAN's eq. 4 writes Lap(lam) while its accountant uses lam as the inverse scale;
public implementations that add noise of scale lam and account with lam understate epsilon.)

The moments accountant alpha(l) = l * RDP(l + 1), so the results here are RDP curves that compose in the
ledger with everything else; the tail bound eps = min_l (alpha(l) + log 1/delta) / l is exactly the
classical RDP conversion at order l + 1.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from .rdp import as_orders


def _check_lam(lam: float) -> float:
    lam = float(lam)
    if not lam > 0:
        raise ValueError(f"lam (inverse Laplace scale) must be > 0, got {lam}")
    return lam


def laplace_vote(votes, lam: float, rng: np.random.Generator) -> int:
    """argmax_j (n_j + Lap(1 / lam)): the PATE_lam aggregation (PATE-GAN eq. 4, lam as inverse scale)."""
    votes = np.asarray(votes, dtype=float)
    return int(np.argmax(votes + rng.laplace(0.0, 1.0 / _check_lam(lam), size=votes.shape)))


def log_q_laplace(votes, lam: float) -> float:
    """log of Lemma 4's bound: Pr[output != j*] <= sum_{j != j*} (2 + lam d_j) / (4 exp(lam d_j)), d_j = n* - n_j."""
    lam = _check_lam(lam)
    votes = np.asarray(votes, dtype=float)
    if votes.ndim != 1 or votes.size < 2:
        raise ValueError(f"votes must be a 1-D array over >= 2 classes, got shape {votes.shape}")
    gaps = np.delete(votes.max() - votes, np.argmax(votes))
    return float(logsumexp(np.log(2.0 + lam * gaps) - np.log(4.0) - lam * gaps))


def rdp_laplace_pate_data_independent(lam: float, orders) -> np.ndarray:
    """Papernot et al. 2017 Theorem 2: alpha(l) <= 2 lam^2 l (l + 1), i.e. RDP(a) = 2 lam^2 a, any order a."""
    return 2.0 * _check_lam(lam) ** 2 * as_orders(orders)


def rdp_laplace_pate(votes, lam: float, orders) -> np.ndarray:
    """Data-dependent RDP of one Laplace PATE query (PATE-GAN appendix Theorem 5).

    At orders a = l + 1 with integer moment l >= 1, and only if q < (e^{2 lam} - 1) / (e^{4 lam} - 1):
    alpha(l) <= log((1 - q) ((1 - q) / (1 - e^{2 lam} q))^l + q e^{2 lam l}), RDP(a) = alpha(l) / l.
    Elsewhere (non-integer moments, or q too large) the data-independent value; never above it."""
    orders = as_orders(orders)
    data_independent = rdp_laplace_pate_data_independent(lam, orders)
    log_q = log_q_laplace(votes, lam)
    # validity condition of Papernot et al. 2017 Theorem 3: q < (e^{2lam} - 1) / (e^{4lam} - 1) = 1 / (e^{2lam} + 1),
    # in logs (finite for any lam, where e^{4lam} overflows from lam ~ 178)
    if not log_q < -np.logaddexp(0.0, 2.0 * lam):
        return data_independent
    q = np.exp(log_q)
    moments = orders - 1.0
    integer = (moments >= 1.0) & (moments == np.round(moments))
    l = moments[integer]
    alpha = np.logaddexp(
        np.log1p(-q) + l * (np.log1p(-q) - np.log1p(-np.exp(2.0 * lam + log_q))),  # e^{2lam} q < 1 here
        log_q + 2.0 * lam * l,
    )
    rdp = data_independent.copy()
    rdp[integer] = np.minimum(data_independent[integer], alpha / l)
    return rdp


def rdp_laplace_pate_cheapest(teachers: int, lam: float, orders) -> np.ndarray:
    """The least data-dependent RDP of one query over every vote [teachers - k, k] of `teachers` teachers between
    two classes (PATE-GAN's real / fake), order by order: a lower bound on what any query costs. The bound depends
    on the gap |teachers - 2k| alone, so k <= teachers / 2 covers every vote."""
    if int(teachers) < 1:
        raise ValueError(f"need teachers >= 1, got {teachers}")
    # Lemma 4 (Papernot et al. 2017; PATE-GAN appendix): q is a function of the gap n* - n_j alone
    return np.min([rdp_laplace_pate([teachers - k, k], lam, orders) for k in range(int(teachers) // 2 + 1)], axis=0)
