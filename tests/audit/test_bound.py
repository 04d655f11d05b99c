"""One-run audit bounds (dpgen.audit.bound) against hand computations and randomized response."""
import math

import numpy as np
import pytest

from dpgen.audit.bound import audit_scores, one_run_epsilon, one_run_p_value


def test_p_value_by_hand():
    # m = 4, r = 2 guesses, both right, eps = 0: q = 1/2, beta = P[B >= 2] = 1/4;
    # P[B >= 1] - beta = 3/4 - 1/4 = 1/2 (i = 1), P[B >= 0] - beta = 3/4, halved (i = 2): alpha = 1/2
    assert one_run_p_value(4, 2, 2, 0.0, 0.0) == pytest.approx(0.25)
    assert one_run_p_value(4, 2, 2, 0.0, 0.01) == pytest.approx(0.25 + 2 * 4 * 0.01 * 0.5)
    # eps = ln 3: q = 3/4, beta = 9/16
    assert one_run_p_value(10, 2, 2, math.log(3), 0.0) == pytest.approx(9 / 16)


def test_all_guesses_right_without_delta_is_the_closed_form():
    # P[B = r] = q^r = significance  =>  eps = logit(significance ** (1 / r))
    for r, s in [(100, 0.05), (20, 0.01), (500, 0.05 / 6)]:
        q = s ** (1 / r)
        assert one_run_epsilon(1000, r, r, 0.0, s) == pytest.approx(math.log(q / (1 - q)), abs=1e-5)


def test_chance_guesses_give_zero_and_delta_only_lowers_the_bound():
    assert one_run_epsilon(1000, 100, 50, 1e-5) == 0.0
    bounds = [one_run_epsilon(1000, 100, 90, delta) for delta in (1e-3, 1e-5, 0.0)]
    assert bounds[0] < bounds[1] < bounds[2]


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_randomized_response_bound_holds_and_is_not_vacuous(eps):
    # eps-DP randomized response per canary: the score tells the coin right with probability e^eps / (1 + e^eps).
    # The bound must exceed the true eps in at most ~5% of runs (significance 0.05), and still find most of it.
    rng = np.random.default_rng(0)
    bounds = []
    for _ in range(100):
        coins = rng.random(1000) < 0.5
        told = np.where(rng.random(1000) < math.exp(eps) / (1 + math.exp(eps)), coins, ~coins)
        bounds.append(audit_scores(told + 0.01 * rng.random(1000), coins, delta=0.0).epsilon)
    assert np.mean(np.array(bounds) > eps) <= 0.08
    assert np.median(bounds) > 0.5 * eps


def test_perfectly_separated_canaries_give_a_large_bound():
    rng = np.random.default_rng(1)
    coins = rng.random(1000) < 0.5
    bound = audit_scores(coins.astype(float), coins, delta=1e-5)
    assert bound.correct == bound.guesses and bound.epsilon > 4
    assert audit_scores(rng.random(1000), coins, delta=1e-5).epsilon < 0.5


def test_scores_and_flags_must_match():
    with pytest.raises(ValueError, match="one inclusion flag per canary"):
        audit_scores([1.0, 2.0], [True], delta=1e-5)
