"""How many steps of a fixed cost fit (epsilon, delta): the search behind `StepCost.steps` (cost.py)."""

from __future__ import annotations

MAX_STEPS = 10**12


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
