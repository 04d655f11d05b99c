"""Renyi-DP orders and the conversion of an RDP curve to (epsilon, delta)-DP."""

from __future__ import annotations

import numpy as np

# Dense grid where the optimum usually lies (small epsilons need large orders), plus a long tail.
DEFAULT_ORDERS = np.concatenate([[1.1, 1.5], np.arange(2.0, 201.0), [256.0, 512.0, 1024.0]])

CONVERSIONS = ("classical", "improved")


def as_orders(orders) -> np.ndarray:
    """Orders as a 1-D float array; every order must be > 1."""
    orders = np.atleast_1d(np.asarray(orders, dtype=float))
    if orders.ndim != 1 or orders.size == 0 or np.any(~(orders > 1)):
        raise ValueError(f"RDP orders must be a non-empty 1-D array of numbers > 1, got {orders}")
    return orders


def check_delta(delta: float) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return delta


def check_delta_for_size(delta: float, n: int) -> None:
    """ValueError unless delta < 1 / n for a data set of n records. A mechanism that publishes one record chosen at
    random, in full, is (0, 1 / n)-DP (Dwork & Roth 2014, sec. 2.3), so a delta near or above 1 / n promises
    nothing; the usual choice is well below it (1e-5 for MNIST's 60,000 records is 0.6 / n)."""
    if n > 0 and not delta < 1.0 / n:
        raise ValueError(f"privacy.delta={delta:g} is not below 1/N for the N training records: a mechanism that "
                         "publishes one record in full satisfies (0, 1/N)-DP, so this delta protects no one. Choose a "
                         "delta well below 1/N (the usual 1e-5 for 60,000 records is 0.6/N), or set "
                         "privacy.allow_large_delta=true to insist (privacy.json then says so)")


def eps_from_rdp(rdp, orders, delta: float, conversion: str = "classical") -> tuple[float, float]:
    """Smallest epsilon over orders such that the RDP curve implies (epsilon, delta)-DP, and its order.

    classical: eps = rdp(a) + log(1/delta) / (a - 1)            (Mironov 2017, Prop. 3; used by G-PATE)
    improved:  eps = rdp(a) + log((a-1)/a) - (log delta + log a) / (a - 1)   (Balle et al. 2020, Thm. 21)
    """
    orders = as_orders(orders)
    rdp = np.broadcast_to(np.asarray(rdp, dtype=float), orders.shape)
    delta = check_delta(delta)
    if np.any(rdp < 0) or np.any(np.isnan(rdp)):
        raise ValueError("RDP values must be >= 0")
    if conversion not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")
    if conversion == "classical":
        eps = rdp + np.log(1.0 / delta) / (orders - 1.0)
    else:
        eps = rdp + np.log((orders - 1.0) / orders) - (np.log(delta) + np.log(orders)) / (orders - 1.0)
    i = int(np.argmin(eps))
    return max(float(eps[i]), 0.0), float(orders[i])
