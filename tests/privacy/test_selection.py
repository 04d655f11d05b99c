"""Report Noisy Max over a private validation split's correct counts, and its composition with the generator."""
import math

import numpy as np
import pytest

from dpgen.privacy.selection import (SelectionBudgetError, charge, composed_epsilon, dp_epsilon, earlier_charges,
                                     report_noisy_max, selection_report)


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


def charges(*pairs):
    return [{"epsilon": e, "disjoint": d, "split": None, "by": "test"} for e, d in pairs]


def test_selections_compose_with_the_generator_in_parallel_only_on_disjoint_records():
    generator = {"epsilon": 1.0, "delta": 1e-5, "governing_bound": "data_independent"}
    parallel = selection_report(charges((0.3, True), (0.3, True)), generator)
    assert parallel["epsilon"] == pytest.approx(0.6) and parallel["delta"] == 0.0 and parallel["selections"] == 2
    assert parallel["release"]["epsilon"] == 1.0 and parallel["release"]["delta"] == 1e-5  # max(1, 0.6)
    assert "parallel" in parallel["release"]["composition"]
    sequential = selection_report(charges((0.3, True), (0.3, False)), generator)  # one selection on another split
    assert sequential["release"]["epsilon"] == pytest.approx(1.6) and "sequential" in sequential["release"]["composition"]
    assert composed_epsilon(1.0, charges((1.5, True), (1.0, True)))[0] == 2.5  # selections on one split add up
    assert "not known" in selection_report(charges((1.0, False)), None)["release"]["note"]
    # a generator whose privacy.json says it has no guarantee (method=pategan_2018_code): no epsilon is composed
    claim = {"private": False, "guarantee": "none", "claimed_epsilon": 1.0}
    release = selection_report(charges((1.0, True)), claim)["release"]
    assert "no privacy guarantee" in release["note"] and "epsilon" not in release


def test_the_release_combines_the_generators_dp_bound_not_a_data_dependent_one():
    """G-PATE's default run stops at a data-dependent epsilon of 9.97 whose DP bound is 15.83 (the kept
    gpate_mnist_eps10_private_val): the release is max(15.83, selections), the 9.97 only beside it, labelled."""
    total = {"data_dependent": {"classical": {"epsilon": 9.97}}, "data_independent": {
        "classical": {"epsilon": 15.83}, "improved": {"epsilon": 14.87}}}
    gpate = {"epsilon": 9.97, "delta": 1e-5, "governing_bound": "data_dependent", "conversion": "classical",
             "total": total}
    assert dp_epsilon(gpate) == (15.83, "data_independent")
    release = selection_report(charges((10.0, True), (10.0, True)), gpate)["release"]
    assert release["epsilon"] == 20.0 and release["bound"] == "data_independent"
    assert release["governing_bound"]["bound"] == "data_dependent" and "not a differential" in release[
        "governing_bound"]["note"]
    # GS-WGAN: the paper's count "as_published" governs; the DP bound is "sound", at the run's conversion (or the
    # smallest sound conversion where that one was not computed for it)
    gswgan = {"epsilon": 0.9, "delta": 1e-5, "governing_bound": "as_published", "conversion": "pld",
              "total": {"as_published": {"classical": {"epsilon": 0.9}},
                        "sound": {"classical": {"epsilon": 1.3}, "improved": {"epsilon": 1.1}}}}
    assert dp_epsilon(gswgan) == (1.1, "sound")
    assert dp_epsilon({"epsilon": 1.0, "governing_bound": "sound"}) == (1.0, "sound")


def test_a_selection_past_the_stated_budget_is_refused_before_it_is_made():
    earlier = charges((0.5, True), (0.25, True))
    made = charge(0.25, True, {"data": "mnist"}, "evaluate.py", earlier, budget=1.0)  # 1.0: exactly the budget
    assert made == {"epsilon": 0.25, "disjoint": True, "split": {"data": "mnist"}, "by": "evaluate.py"}
    with pytest.raises(SelectionBudgetError, match="eval.private_val.budget=1"):
        charge(0.5, True, None, "evaluate.py", earlier, budget=1.0)
    assert charge(100.0, False, None, "train.py", earlier, budget=None)["epsilon"] == 100.0  # no stated budget


def test_an_older_privacy_json_counts_its_training_selections():
    old = {"records": {"private_val": {"data": "mnist", "fraction": 0.0167, "seed": 0}},
           "downstream_selection": {"epsilon_each": 10.0, "selections": 2, "epsilon": 20.0}}
    assert [c["epsilon"] for c in earlier_charges(old)] == [10.0, 10.0]
    assert earlier_charges({"downstream_selection": {"charges": charges((1.0, True))}}) == charges((1.0, True))
    assert earlier_charges(None) == [] and earlier_charges({}) == []
