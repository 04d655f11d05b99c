"""Confident-GNMax (Papernot et al. 2018, "Scalable private learning with PATE"; G-PATE appendix D).

Conventions: `votes` are teacher vote counts over m >= 2 classes; `threshold` is an absolute vote count;
sigma1 is the std of the threshold noise, sigma2 the std of the GNMax noise. Every RDP value is a
numpy array over `orders`. Data-dependent values are bounds at the given votes (Papernot et al. 2018,
section 3): they depend on private data and are not by themselves a DP release.
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr, logsumexp

from .rdp import as_orders


def _check_sigma(name: str, sigma: float) -> float:
    sigma = float(sigma)
    if not sigma > 0:
        raise ValueError(f"{name} must be > 0, got {sigma}")
    return sigma


def _votes_2d(votes) -> np.ndarray:
    votes = np.asarray(votes, dtype=float)
    if votes.ndim != 2 or votes.shape[1] < 2:
        raise ValueError(f"votes must have at least 2 classes, got shape {votes.shape}")
    if np.any(votes < 0):
        raise ValueError("votes must be >= 0")
    return votes


def _log_q_gnmax_2d(votes: np.ndarray, sigma: float) -> np.ndarray:
    """Row-wise log q of Proposition 7 (Papernot et al. 2018), capped at log(1 - 1/m)."""
    m = votes.shape[1]
    top = np.argmax(votes, axis=1)
    gaps = votes.max(axis=1, keepdims=True) - votes
    # Prop. 7: q <= sum_{j != i*} Pr[N(0, 2 sigma^2) > n* - n_j] = sum erfc((n* - n_j) / (2 sigma)) / 2
    log_terms = log_ndtr(-gaps / (np.sqrt(2.0) * sigma))
    log_terms[np.arange(len(votes)), top] = -np.inf
    log_q = logsumexp(log_terms, axis=1)
    # i* is the most likely outcome, so Pr[output != i*] <= 1 - 1/m: a valid cap on the union bound
    return np.minimum(log_q, np.log1p(-1.0 / m))


def _log1mexp(x: np.ndarray) -> np.ndarray:
    """log(1 - exp(x)) for x <= 0, accurate near both ends."""
    x = np.asarray(x, dtype=float)
    out = np.full(x.shape, -np.inf)
    near = x > -np.log(2.0)
    out[near] = np.log(-np.expm1(x[near]))
    out[~near] = np.log1p(-np.exp(x[~near]))
    return out


def _rdp_from_log_q(log_q: np.ndarray, variance: float, orders: np.ndarray) -> np.ndarray:
    """Data-dependent RDP (Q, orders) of a mechanism whose data-independent RDP is eps(mu) = mu / variance
    and whose likely outcome has Pr[output != i*] <= exp(log_q): Theorem 5 of G-PATE appendix D (Theorem 6
    of Papernot et al. 2018) with mu2 = sqrt(variance log 1/q), mu1 = mu2 + 1 (their Prop. 10 choice).
    Where a validity condition fails the data-independent value orders / variance is returned."""
    log_q = np.asarray(log_q, dtype=float)[:, None]
    lam = orders[None, :]
    data_independent = np.broadcast_to(lam / variance, (log_q.shape[0], lam.shape[1]))
    certain = np.isneginf(log_q)  # output fixed at i*: the mechanism leaks nothing at these votes
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mu2 = np.sqrt(-variance * log_q)
        mu1 = mu2 + 1.0
        eps1 = mu1 / variance
        eps2 = mu2 / variance
        # Theorem 5 conditions: mu2 > 1; lambda <= mu1; q <= e^{(mu2-1) eps2} / (mu1/(mu1-1) * mu2/(mu2-1))^mu2;
        # and q e^{eps2} < 1 so that A(q, mu2, eps2) is finite and positive.
        valid = (
            (mu2 > 1.0)
            & (lam <= mu1)
            & (log_q <= (mu2 - 1.0) * eps2 - mu2 * (np.log(mu1 / (mu1 - 1.0)) + np.log(mu2 / (mu2 - 1.0))))
            & (log_q + eps2 < 0.0)
        )
        log_1mq = _log1mexp(log_q)
        # log A = log(1-q) - log(1 - (q e^{eps2})^{(mu2-1)/mu2});  log B = eps1 - log(q) / (mu1 - 1)
        log_a = log_1mq - _log1mexp((log_q + eps2) * (1.0 - 1.0 / mu2))
        log_b = eps1 - log_q / (mu1 - 1.0)
        # D_lambda <= log((1-q) A^{lambda-1} + q B^{lambda-1}) / (lambda - 1)
        bound = np.logaddexp(log_1mq + (lam - 1.0) * log_a, log_q + (lam - 1.0) * log_b) / (lam - 1.0)
    rdp = np.where(valid, np.minimum(data_independent, bound), data_independent)
    return np.where(certain, 0.0, rdp)


def log_q_gnmax(votes, sigma: float) -> float:
    """log of the Prop. 7 bound on Pr[GNMax(votes) != argmax votes], capped at log(1 - 1/m)."""
    sigma = _check_sigma("sigma", sigma)
    return float(_log_q_gnmax_2d(_votes_2d(np.atleast_2d(votes)), sigma)[0])


def rdp_gnmax_data_independent(sigma: float, orders) -> np.ndarray:
    """GNMax on a histogram with L2 sensitivity sqrt(2): (lambda, lambda / sigma^2)-RDP (G-PATE appendix D)."""
    sigma = _check_sigma("sigma", sigma)
    return as_orders(orders) / sigma**2


def rdp_gnmax(votes, sigma: float, orders) -> np.ndarray:
    """Data-dependent RDP of GNMax at these votes (Theorem 5, appendix D); never above lambda / sigma^2."""
    sigma = _check_sigma("sigma", sigma)
    log_q = _log_q_gnmax_2d(_votes_2d(np.atleast_2d(votes)), sigma)
    return _rdp_from_log_q(log_q, sigma**2, as_orders(orders))[0]


def rdp_threshold_data_independent(sigma1: float, orders) -> np.ndarray:
    """Noisy max-vote check, sensitivity 1, noise sigma1: (lambda, lambda / (2 sigma1^2))-RDP (appendix D)."""
    sigma1 = _check_sigma("sigma1", sigma1)
    return as_orders(orders) / (2.0 * sigma1**2)


def _log_pr_answered_and_not(top: np.ndarray, threshold: float, sigma1: float):
    """log Pr[answered] and log Pr[not answered] of queries whose top vote counts are `top`."""
    # Pr[max + N(0, sigma1^2) >= T] = Phi((max - T) / sigma1), and its complement Phi((T - max) / sigma1)
    return log_ndtr((top - threshold) / sigma1), log_ndtr((threshold - top) / sigma1)


def log_pr_answered(votes, threshold: float, sigma1: float) -> float:
    """log Pr[the noisy max vote reaches the threshold] (Algorithm 3 line 1, appendix D)."""
    sigma1 = _check_sigma("sigma1", sigma1)
    top = _votes_2d(np.atleast_2d(votes)).max(axis=1)
    return float(_log_pr_answered_and_not(top, float(threshold), sigma1)[0][0])


def _rdp_threshold_top(top: np.ndarray, threshold: float, sigma1: float, orders: np.ndarray) -> np.ndarray:
    """Data-dependent RDP (Q, orders) of the threshold checks of Q queries: a function of their top votes alone."""
    log_yes, log_no = _log_pr_answered_and_not(top, threshold, sigma1)
    # The check has two outcomes; the likely one fails with probability q = min(p, 1 - p). Its
    # data-independent RDP is lambda / (2 sigma1^2) (sensitivity 1), i.e. the Gaussian form above with
    # variance 2 sigma1^2, "noise sqrt(2) sigma1" in Papernot et al. 2018 (section 4.1, Theorem 6).
    return _rdp_from_log_q(np.minimum(log_yes, log_no), 2.0 * sigma1**2, orders)


def rdp_threshold(votes, threshold: float, sigma1: float, orders) -> np.ndarray:
    """Data-dependent RDP of the noisy threshold check; never above lambda / (2 sigma1^2)."""
    sigma1 = _check_sigma("sigma1", sigma1)
    top = _votes_2d(np.atleast_2d(votes)).max(axis=1)
    return _rdp_threshold_top(top, float(threshold), sigma1, as_orders(orders))[0]


def rdp_threshold_cheapest(teachers: int, bins: int, threshold: float, sigma1: float, orders) -> np.ndarray:
    """The least data-dependent RDP of one threshold check over every vote of `teachers` teachers in `bins` bins,
    order by order: a lower bound on what any Confident-GNMax query costs, answered or not (appendix D charges
    the check always). The check sees the top vote alone, and every count from ceil(teachers / bins) (votes
    spread evenly) to `teachers` (unanimous) can be the top one, so all of them are tried."""
    sigma1 = _check_sigma("sigma1", sigma1)
    if int(teachers) < 1 or int(bins) < 2:
        raise ValueError(f"need teachers >= 1 and bins >= 2, got {teachers} and {bins}")
    # Algorithm 3 line 1 (appendix D) reads max_j n_j alone; bins summing to `teachers` put it in this range
    top = np.arange(-(-int(teachers) // int(bins)), int(teachers) + 1, dtype=float)
    return _rdp_threshold_top(top, float(threshold), sigma1, as_orders(orders)).min(axis=0)


def rdp_confident_gnmax(votes, threshold: float, sigma1: float, sigma2: float, orders, answered: bool) -> np.ndarray:
    """Data-dependent RDP of one Confident-GNMax query, as G-PATE charges it (appendix D: eps1 if the
    output is bottom, eps1 + eps2 otherwise), with eps1 the data-dependent threshold bound and eps2 the
    data-dependent GNMax bound."""
    total, _ = rdp_confident_gnmax_batch(np.atleast_2d(votes), threshold, sigma1, sigma2, orders, [answered])
    return total


def rdp_confident_gnmax_batch(votes, threshold: float, sigma1: float, sigma2: float, orders, answered):
    """Sum over Q queries (votes of shape (Q, m), answered of shape (Q,)) of the Confident-GNMax RDP.

    Returns (data_dependent_total, data_independent_total), arrays over orders. A query costs its
    threshold check always and its GNMax step only when answered (appendix D)."""
    sigma1 = _check_sigma("sigma1", sigma1)
    sigma2 = _check_sigma("sigma2", sigma2)
    orders = as_orders(orders)
    votes = _votes_2d(votes)
    answered = np.asarray(answered, dtype=bool)
    if answered.shape != (votes.shape[0],):
        raise ValueError(f"answered must have shape ({votes.shape[0]},), got {answered.shape}")
    n_answered = int(answered.sum())
    data_dependent = _rdp_threshold_top(votes.max(axis=1), float(threshold), sigma1, orders).sum(axis=0)
    if n_answered:
        log_q = _log_q_gnmax_2d(votes[answered], sigma2)
        data_dependent = data_dependent + _rdp_from_log_q(log_q, sigma2**2, orders).sum(axis=0)
    data_independent = len(votes) * orders / (2.0 * sigma1**2) + n_answered * orders / sigma2**2
    # each query's data-dependent value is <= its data-independent one; the min only absorbs rounding
    return np.minimum(data_dependent, data_independent), data_independent
