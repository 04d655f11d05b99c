"""Report Noisy Max over a private validation split's correct counts, and its composition with the generator."""
import math

import numpy as np
import pytest

from dpgen.privacy.selection import composed_epsilon, report_noisy_max, selection_report


def first_wins(gap: float, scale: float) -> float:
    """P(c0 + L0 > c1 + L1) for L ~ Lap(scale) and gap = c0 - c1, from the density of L1 - L0,
    (1 + |z| / b) e^{-|z| / b} / (4 b), whose tail beyond t >= 0 is e^{-t / b} (2 + t / b) / 4."""
    tail = math.exp(-abs(gap) / scale) * (2 + abs(gap) / scale) / 4
    return 1 - tail if gap >= 0 else tail


def test_report_noisy_max_costs_the_epsilon_derived_and_not_less():
    """Two epochs, one validation record added: each count rises by 0 or 1. The exact privacy loss of either outcome,
    over every gap between the counts, stays within epsilon and comes within 2% of it (the bound is tight)."""
    epsilon = 0.5
    worst = 0.0
    for gap in range(-200, 201):
        for moved in ((1, 0), (0, 1), (1, 1)):  # which counts the added record raised
            after = gap + moved[0] - moved[1]
            for sign in (1, -1):  # the first epoch chosen, the second (its gap the other way round)
                p, q = first_wins(sign * gap, 1 / epsilon), first_wins(sign * after, 1 / epsilon)
                worst = max(worst, abs(math.log(p / q)))
    assert 0.98 * epsilon < worst <= epsilon + 1e-9


def test_report_noisy_max_picks_as_the_laplace_noise_says():
    rng = np.random.default_rng(0)
    epsilon, draws = 0.5, 20_000
    wins = sum(report_noisy_max([103, 100], epsilon, rng) == 0 for _ in range(draws))
    p = first_wins(3, 1 / epsilon)
    assert abs(wins / draws - p) < 4 * math.sqrt(p * (1 - p) / draws)
    equal = np.bincount([report_noisy_max([50, 50, 50], epsilon, rng) for _ in range(6000)], minlength=3) / 6000
    assert np.all(np.abs(equal - 1 / 3) < 0.03)
    assert report_noisy_max([0, 10_000, 0], 1.0, rng) == 1  # a gap of 10^4 counts: noise of scale 1 never closes it
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        report_noisy_max([1, 2], 0.0, rng)
    with pytest.raises(ValueError, match="non-empty"):
        report_noisy_max([], 1.0, rng)


def test_selections_compose_with_the_generator_in_parallel_only_on_disjoint_records():
    generator = {"epsilon": 1.0, "delta": 1e-5}
    parallel = selection_report(0.3, 2, generator, disjoint=True)
    assert parallel["epsilon"] == pytest.approx(0.6) and parallel["delta"] == 0.0 and parallel["selections"] == 2
    assert parallel["release"]["epsilon"] == 1.0 and parallel["release"]["delta"] == 1e-5  # max(1, 0.6)
    assert "parallel" in parallel["release"]["composition"]
    sequential = selection_report(0.3, 2, generator, disjoint=False)
    assert sequential["release"]["epsilon"] == pytest.approx(1.6) and "sequential" in sequential["release"]["composition"]
    assert composed_epsilon(1.0, 2.5, disjoint=True) == 2.5
    assert "not known" in selection_report(1.0, 1, None, disjoint=False)["release"]["note"]
    # a generator whose privacy.json says it has no guarantee (method=pategan_2018_code): no epsilon is composed
    claim = {"private": False, "guarantee": "none", "claimed_epsilon": 1.0}
    release = selection_report(1.0, 1, claim, disjoint=True)["release"]
    assert "no privacy guarantee" in release["note"] and "epsilon" not in release
