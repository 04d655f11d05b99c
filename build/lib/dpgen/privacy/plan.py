"""Budget planner: how many training steps fit (epsilon, delta) for given mechanism parameters."""

from __future__ import annotations

import math

import numpy as np

from . import pate, pategan, pld
from .dpsgd import rdp_subsampled_gaussian
from .rdp import DEFAULT_ORDERS, as_orders, eps_from_rdp

MAX_STEPS = 10**12


def steps_within_budget(rdp_per_step, orders, epsilon: float, delta: float, conversion: str = "classical") -> int:
    """Largest n with eps(n * rdp_per_step) <= epsilon (RDP composes additively; eps grows with n).
    Capped at MAX_STEPS; 0 when a single step is already over budget."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    orders = as_orders(orders)
    rdp_per_step = np.asarray(rdp_per_step, dtype=float)
    return largest_fitting(lambda n: eps_from_rdp(n * rdp_per_step, orders, delta, conversion)[0] <= epsilon)


def steps_within_budget_pld(events_per_step, epsilon: float, delta: float, mu_per_step: float = 0.0) -> int:
    """Largest n with eps_pld(n x each (event, count) of one step, and n mu-GDP releases) <= epsilon
    (n mu-GDP releases compose to sqrt(n) mu; privacy.pld)."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    return largest_fitting(lambda n: pld.epsilon_pld(pld.compose_gdp(
        [(event, n * count) for event, count in events_per_step], math.sqrt(n) * mu_per_step), delta) <= epsilon)


def largest_fitting(fits) -> int:
    """Largest n with fits(n), for a fits(n) that holds up to some n and fails beyond (a cost growing with n).
    Capped at MAX_STEPS; 0 when fits(1) fails."""
    if not fits(1):
        return 0
    low, high = 1, 2
    while high < MAX_STEPS and fits(high):
        low, high = high, high * 2
    if high >= MAX_STEPS and fits(MAX_STEPS):
        return MAX_STEPS
    while high - low > 1:  # invariant: fits(low), not fits(high)
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _plan(best, worst, orders, epsilon, delta, conversion, **params) -> dict:
    return {
        **params,
        "epsilon": epsilon,
        "delta": delta,
        "conversion": conversion,
        "best_case_steps": steps_within_budget(best, orders, epsilon, delta, conversion),
        "worst_case_steps": steps_within_budget(worst, orders, epsilon, delta, conversion),
    }


def plan_confident_gnmax(teachers: int, sigma1: float, sigma2: float, threshold: float, queries_per_step: int,
                         epsilon: float, delta: float, bins: int = 10, top_share: float = 1.0,
                         orders=DEFAULT_ORDERS, conversion: str = "classical") -> dict:
    """G-PATE. threshold is a fraction of the teachers (the paper's T = 0.5). Best case: every query answered
    with the top bin holding `top_share` of the votes and the next bin the rest (1 = unanimous; a measured
    consensus, e.g. the top_share of scripts/gpate_signal_check.py, plans a real run), data-dependent cost.
    Worst case: data-independent, every query answered."""
    if not 0.5 <= top_share <= 1:
        raise ValueError(f"top_share is the top bin's share of the votes, in [0.5, 1]; got {top_share}")
    orders = as_orders(orders)
    votes = np.zeros((1, bins))
    votes[0, :2] = top_share * teachers, (1 - top_share) * teachers
    best, worst = pate.rdp_confident_gnmax_batch(votes, threshold * teachers, sigma1, sigma2, orders, [True])
    return _plan(queries_per_step * best, queries_per_step * worst, orders, epsilon, delta, conversion,
                 mechanism="confident_gnmax", teachers=teachers, sigma1=sigma1, sigma2=sigma2, threshold=threshold,
                 queries_per_step=queries_per_step, bins=bins, top_share=top_share)


def plan_laplace_pate(teachers: int, lam: float, queries_per_step: int, epsilon: float, delta: float,
                      classes: int = 2, orders=DEFAULT_ORDERS, conversion: str = "classical") -> dict:
    """PATE-GAN. Best case: unanimous votes (data-dependent); worst case: data-independent."""
    orders = as_orders(orders)
    votes = np.zeros(classes)
    votes[0] = teachers
    best = pategan.rdp_laplace_pate(votes, lam, orders)
    worst = pategan.rdp_laplace_pate_data_independent(lam, orders)
    return _plan(queries_per_step * best, queries_per_step * worst, orders, epsilon, delta, conversion,
                 mechanism="laplace_pate", teachers=teachers, lam=lam, queries_per_step=queries_per_step,
                 classes=classes)


def plan_dpsgd(sample_rate: float, noise_multiplier: float, epsilon: float, delta: float, orders=DEFAULT_ORDERS,
               conversion: str = "classical") -> dict:
    """DP-SGD: one step per noisy gradient; best and worst case coincide. conversion="pld": privacy.pld."""
    params = {"mechanism": "dpsgd", "sample_rate": sample_rate, "noise_multiplier": noise_multiplier}
    if conversion == "pld":
        steps = steps_within_budget_pld([(pld.dpsgd_event(sample_rate, noise_multiplier), 1)], epsilon, delta)
        return {**params, "epsilon": epsilon, "delta": delta, "conversion": conversion,
                "best_case_steps": steps, "worst_case_steps": steps}
    orders = as_orders(orders)
    step = rdp_subsampled_gaussian(sample_rate, noise_multiplier, 1, orders)
    return _plan(step, step, orders, epsilon, delta, conversion, **params)
