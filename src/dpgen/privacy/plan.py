"""How many steps of a fixed cost fit (epsilon, delta): the searches behind `StepCost.steps` (cost.py)."""

from __future__ import annotations

import math

from . import pld

MAX_STEPS = 10**12


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
