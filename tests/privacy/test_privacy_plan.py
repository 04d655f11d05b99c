"""StepCost (privacy/cost.py): the steps a budget buys, against hand computations and independent accountants."""
import math

import numpy as np
import pytest

from dpgen.aggregation import dpgradagg, hybrid
from dpgen.aggregation.dpgradagg import DPGradAggParams
from dpgen.privacy import pld
from dpgen.privacy.cost import StepCost, dpsgd_step, times
from dpgen.privacy.dpsgd import rdp_subsampled_gaussian
from dpgen.privacy.gdp import eps_from_gdp
from dpgen.privacy.laplace import rdp_laplace
from dpgen.privacy.pate import rdp_confident_gnmax_batch
from dpgen.privacy.plan import MAX_STEPS
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp

DELTA = math.exp(-1.0)  # with the single order 2: eps = rdp + 1
ORDERS = np.asarray(DEFAULT_ORDERS, dtype=float)


def fixed(rdp: float) -> StepCost:
    return StepCost({"data_independent": np.array([rdp])}, np.array([2.0]))


def test_steps_by_hand():
    # 0.25 per step, eps 2.05 -> rdp <= 1.05 -> 4 steps
    assert fixed(0.25).steps(2.05, DELTA, "data_independent", "classical") == 4
    assert fixed(0.25).steps(1.2, DELTA, "data_independent", "classical") == 0
    assert fixed(0.0).steps(2.0, DELTA, "data_independent", "classical") == MAX_STEPS
    with pytest.raises(ValueError, match="epsilon"):
        fixed(0.25).steps(0.0, DELTA, "data_independent", "classical")


def test_an_upfront_release_is_paid_first():
    # 0.5 upfront, 0.25 per step, rdp <= 1.05 -> 2 steps
    cost = StepCost({"data_independent": np.array([0.25])}, np.array([2.0]), upfront={"data_independent": np.array([0.5])})
    assert cost.steps(2.05, DELTA, "data_independent", "classical") == 2


def test_confident_gnmax_worst_case_by_hand():
    # per query, all answered: 2/(2 * 10^2) + 2/10^2 = 0.03; 10 queries per step: 0.3; rdp <= 1.05 -> 3 steps
    cost = dpgradagg.step_cost(DPGradAggParams(sigma1=10.0, sigma2=10.0, threshold=0.5), 100, 10, [2.0])
    assert cost.worst["data_independent"] == pytest.approx([0.3])
    assert cost.steps(2.05, DELTA, "data_independent", "classical") == 3
    # best case, no query answered: the threshold checks alone, 10 x 2/(2 * 10^2) = 0.1 per step -> 10 steps
    assert cost.best["data_independent"] == pytest.approx([0.1])
    assert cost.steps(2.05, DELTA, "data_independent", "classical", "best") == 10
    assert cost.steps(2.05, DELTA, "data_dependent", "classical", "best") >= 10


def test_confident_gnmax_paper_settings_with_the_class_ratio():
    # G-PATE eps = 10 on MNIST: 2000 teachers, sigma1 600, sigma2 100, T = 0.5: unanimous votes cost far less
    agg = DPGradAggParams(sigma1=600.0, sigma2=100.0, threshold=0.5)
    cost = dpgradagg.step_cost(agg, 2000, 100, ORDERS)
    best, worst = (cost.steps(10.0, 1e-5, "data_dependent", "classical", case) for case in ("best", "worst"))
    assert best > 10 * worst > 0
    ratio = dpgradagg.step_cost(agg, 2000, 100, ORDERS, class_ratio_epsilon=1.0)
    n = ratio.steps(10.0, 1e-5, "data_dependent", "classical")
    eps = lambda g: eps_from_rdp(rdp_laplace(1.0, ORDERS) + g * cost.worst["data_independent"], ORDERS, 1e-5)[0]
    assert eps(n) <= 10.0 < eps(n + 1) and n < worst


def test_dpsgd_steps_are_tight_under_rdp_and_pld():
    n = dpsgd_step(0.01, 1.1, 1, ORDERS).steps(2.0, 1e-5, "data_independent", "classical")
    eps = lambda steps: eps_from_rdp(rdp_subsampled_gaussian(0.01, 1.1, steps, ORDERS), ORDERS, 1e-5)[0]
    assert eps(n) <= 2.0 < eps(n + 1)
    # DP-CGAN's reference sample rate and sigma: no step at eps = 1 under RDP, a run under PLD
    cost = dpsgd_step(0.01, 1.12, 1, ORDERS)
    assert cost.steps(1.0, 1e-5, "data_dependent", "classical") == 0  # aliased to the data-independent bound
    n = cost.steps(1.0, 1e-5, "data_independent", "pld")
    eps = [pld.epsilon_pld([(pld.dpsgd_event(0.01, 1.12), k)], 1e-5) for k in (n, n + 1)]
    assert eps[0] <= 1.0 < eps[1] and n > 100


def test_gdp_steps_compose_mu_by_square_root():
    # mu = 0.1 per step composes to sqrt(n) 0.1; eps_gdp(mu = 1, 1e-5) is about 4.4: n = 100 steps give mu = 1
    cost = StepCost({"gdp_mu": 0.1}, ORDERS)
    assert times(cost.worst, 100)["gdp_mu"] == pytest.approx(1.0)
    n = cost.steps(4.0, 1e-5, "data_independent", "gdp")
    assert eps_from_gdp(math.sqrt(n) * 0.1, 1e-5) <= 4.0 < eps_from_gdp(math.sqrt(n + 1) * 0.1, 1e-5)
    with pytest.raises(ValueError, match="accounting=clt"):
        StepCost({"gdp_mu": 0.1, "data_independent": ORDERS * 0}, ORDERS).steps(4.0, 1e-5, "data_independent", "gdp")


def test_pate_triplegan_cost_counts_answered_votes_only_in_the_worst_case():
    hp = hybrid.HybridParams(300.0, 300.0, 0.5, 0.4, "rdp")
    cost = hybrid.step_cost(hp, 128, 1, 128 / 60_000, ORDERS)
    assert cost.worst["gdp_mu"] == pytest.approx(math.sqrt(128 * (1 / 300**2 + 2 / 300**2)))
    assert cost.best["gdp_mu"] == pytest.approx(math.sqrt(128) / 300)
    assert cost.steps(10.0, 1e-5, "data_independent", "pld", "best") > cost.steps(10.0, 1e-5, "data_independent", "pld")


def test_epsilon_of_the_first_steps_by_hand():
    # 0.5 upfront, then 0.25 per step in the worst case and 0.125 in the best: eps = rdp + 1
    cost = StepCost({"data_independent": np.array([0.25])}, np.array([2.0]),
                    best={"data_dependent": np.array([0.125]), "data_independent": np.array([0.25])},
                    upfront={"data_independent": np.array([0.5])})
    assert cost.epsilon(DELTA, "data_independent", "classical") == pytest.approx(1.75)
    assert cost.epsilon(DELTA, "data_independent", "classical", n=2) == pytest.approx(2.0)
    assert cost.epsilon(DELTA, "data_dependent", "classical", "best") == pytest.approx(1.625)
    # under PLD: the privacy loss distribution of the step's events, as privacy.pld composes them
    one = dpsgd_step(0.01, 1.12, 2, ORDERS).epsilon(1e-5, "data_independent", "pld", n=3)
    assert one == pytest.approx(pld.epsilon_pld([(pld.dpsgd_event(0.01, 1.12), 6)], 1e-5))


def test_confident_gnmax_best_case_is_below_every_vote_at_a_high_threshold():
    # threshold 1 (all 100 teachers), sigma1 = 10: unanimous votes pass the check with probability 1/2, which the
    # data-dependent bound cannot price below lambda / (2 sigma1^2); votes spread over the 10 bins (top 10) almost
    # surely fail it, which costs far less. The best case is the least over every top vote, not the unanimous one.
    agg = DPGradAggParams(sigma1=10.0, sigma2=10.0, threshold=1.0)
    cost = dpgradagg.step_cost(agg, 100, 10, ORDERS)
    spread, unanimous = np.full((10, 10), 10), np.eye(10)[:1].repeat(10, axis=0) * 100
    for votes in (spread, unanimous):
        for answered in (np.zeros(10, bool), np.ones(10, bool)):
            paid, _ = rdp_confident_gnmax_batch(votes, 100.0, 10.0, 10.0, ORDERS, answered)
            assert np.all(cost.best["data_dependent"] <= paid * (1 + 1e-12))
    assert cost.best["data_dependent"][2] < 0.01 * 10 * ORDERS[2] / (2 * 10.0**2)  # order 2: under 1% of unanimous
