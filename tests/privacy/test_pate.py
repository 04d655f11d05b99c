"""Confident-GNMax accounting (G-PATE appendix D; Papernot et al. 2018)."""

import math

import numpy as np
import pytest
from scipy.special import log_ndtr, logsumexp

from dpgen.privacy import pate
from dpgen.privacy.rdp import DEFAULT_ORDERS


def theorem5_by_hand(q, sigma, lam):
    """Theorem 5 of appendix D written out plainly (no logs) with mu2 = sigma sqrt(log 1/q), mu1 = mu2 + 1,
    eps_i = mu_i / sigma^2 (the Gaussian's data-independent RDP), for a case where all conditions hold."""
    mu2 = sigma * math.sqrt(math.log(1 / q))
    mu1 = mu2 + 1
    eps1, eps2 = mu1 / sigma**2, mu2 / sigma**2
    assert mu2 > 1 and lam <= mu1 and q * math.exp(eps2) < 1
    assert q <= math.exp((mu2 - 1) * eps2) / (mu1 / (mu1 - 1) * mu2 / (mu2 - 1)) ** mu2
    a = (1 - q) / (1 - (q * math.exp(eps2)) ** ((mu2 - 1) / mu2))
    b = math.exp(eps1) / q ** (1 / (mu1 - 1))
    return math.log((1 - q) * a ** (lam - 1) + q * b ** (lam - 1)) / (lam - 1)


def exact_renyi_gaussian_outcome(z, z2, lam):
    """D_lam(Bern(Phi(z)) || Bern(Phi(z2))) computed in logs (log Phi from scipy's log_ndtr)."""
    terms = [lam * log_ndtr(z) + (1 - lam) * log_ndtr(z2), lam * log_ndtr(-z) + (1 - lam) * log_ndtr(-z2)]
    return float(logsumexp(terms)) / (lam - 1)


def phi(x):
    return 0.5 * math.erfc(-x / math.sqrt(2))


def test_log_q_by_hand():
    # votes (10, 7, 0), sigma 2: gaps 3 and 10; q = erfc(3/4)/2 + erfc(10/4)/2 = 0.144422 + 0.000203 = 0.144626
    q = math.erfc(0.75) / 2 + math.erfc(2.5) / 2
    assert q == pytest.approx(0.144626, abs=1e-6)
    assert pate.log_q_gnmax([10, 7, 0], 2.0) == pytest.approx(math.log(q), rel=1e-12)


def test_log_q_capped_at_one_minus_one_over_m():
    # three-way tie: the union bound gives 1/2 + 1/2 = 1, capped at 1 - 1/3
    assert pate.log_q_gnmax([5, 5, 5], 100.0) == pytest.approx(math.log(2 / 3))


def test_data_independent_values():
    # GNMax lambda / sigma^2; threshold lambda / (2 sigma1^2); sigma = 10
    np.testing.assert_allclose(pate.rdp_gnmax_data_independent(10.0, [2, 5]), [0.02, 0.05])
    np.testing.assert_allclose(pate.rdp_threshold_data_independent(10.0, [2, 5]), [0.01, 0.025])


def test_gnmax_data_dependent_by_hand():
    # votes (100, 10, 0), sigma 10: q = erfc(90/20)/2 + erfc(100/20)/2 = 9.9e-11, log q = -23.0351;
    # mu2 = 10 sqrt(23.0351) = 47.995, mu1 = 48.995: Theorem 5 holds for lambda <= mu1.
    q = math.erfc(4.5) / 2 + math.erfc(5.0) / 2
    orders = [2.0, 5.0, 20.0, 60.0]
    rdp = pate.rdp_gnmax([100, 10, 0], 10.0, orders)
    for lam, value in zip(orders[:3], rdp[:3]):
        assert value == pytest.approx(theorem5_by_hand(q, 10.0, lam), rel=1e-6)
    assert rdp[0] == pytest.approx(3.193366e-10, rel=1e-5)  # far below lambda/sigma^2 = 0.02
    assert rdp[3] == pytest.approx(0.6)  # lambda = 60 > mu1: data-independent 60 / 100


def test_threshold_data_dependent_by_hand():
    # max vote 100, T = 40, sigma1 = 10: Pr[answered] = Phi(6), q = Phi(-6) = 9.87e-10; the check is a
    # Gaussian with lambda / (2 sigma1^2) = lambda / (sqrt(2) sigma1)^2, so Theorem 5 at noise sqrt(2) * 10.
    q = phi(-6.0)
    rdp = pate.rdp_threshold([100, 0], 40.0, 10.0, [2.0, 5.0])
    for lam, value in zip([2.0, 5.0], rdp):
        assert value == pytest.approx(theorem5_by_hand(q, math.sqrt(2) * 10.0, lam), rel=1e-6)
    assert pate.log_pr_answered([100, 0], 40.0, 10.0) == pytest.approx(math.log(phi(6.0)))


def test_uninformative_votes_cost_the_data_independent_value():
    # a tie (q capped at 1/2) and a max vote at the threshold (Pr[answered] = 1/2): no data-dependent gain
    np.testing.assert_array_equal(pate.rdp_gnmax([7, 7], 3.0, DEFAULT_ORDERS), DEFAULT_ORDERS / 9.0)
    np.testing.assert_array_equal(pate.rdp_threshold([7, 1], 7.0, 3.0, DEFAULT_ORDERS), DEFAULT_ORDERS / 18.0)


def test_deterministic_output_costs_nothing():
    # a gap so large that Pr[output != argmax] underflows to 0: the output is fixed, RDP 0
    np.testing.assert_array_equal(pate.rdp_gnmax([1e200, 0], 1.0, [2.0, 10.0]), [0.0, 0.0])


@pytest.mark.parametrize("sigma", [1.0, 3.0, 10.0, 40.0])
@pytest.mark.parametrize("lam", [1.5, 2.0, 8.0, 32.0])
def test_bounds_hold_against_exact_divergence(sigma, lam):
    # Two classes: Pr[output 0] = Phi((n0 - n1) / (sqrt(2) sigma)). A neighbour moves one vote, so the gap
    # changes by 2 (GNMax) and the max vote by 1 (threshold). The bound must dominate the exact divergence.
    for n0 in range(0, 161, 8):
        n1 = 160 - n0
        if n0 < n1:
            continue
        gnmax = pate.rdp_gnmax([n0, n1], sigma, [lam])[0]
        for shift in (-2, 2):
            z, z2 = (n0 - n1) / (math.sqrt(2) * sigma), (n0 - n1 + shift) / (math.sqrt(2) * sigma)
            assert gnmax >= exact_renyi_gaussian_outcome(z, z2, lam) * (1 - 1e-9)
        for threshold in (40.0, 100.0, 150.0):
            check = pate.rdp_threshold([n0, n1], threshold, sigma, [lam])[0]
            for shift in (-1, 1):
                z, z2 = (n0 - threshold) / sigma, (n0 + shift - threshold) / sigma
                assert check >= exact_renyi_gaussian_outcome(z, z2, lam) * (1 - 1e-9)


def test_data_dependent_never_above_data_independent():
    rng = np.random.default_rng(1)
    for _ in range(50):
        votes = rng.multinomial(int(rng.integers(10, 5000)), rng.dirichlet(np.ones(10) * 0.3))
        sigma = float(rng.uniform(1, 300))
        assert np.all(pate.rdp_gnmax(votes, sigma, DEFAULT_ORDERS) <= pate.rdp_gnmax_data_independent(sigma, DEFAULT_ORDERS))
        assert np.all(pate.rdp_threshold(votes, 0.5 * votes.sum(), sigma, DEFAULT_ORDERS)
                      <= pate.rdp_threshold_data_independent(sigma, DEFAULT_ORDERS))


def test_more_consensus_never_costs_more():
    for sigma in (5.0, 20.0, 100.0):
        costs = [pate.rdp_gnmax([200 + k, 200 - k, 0], sigma, DEFAULT_ORDERS) for k in range(0, 201, 5)]
        assert all(np.all(b <= a + 1e-15) for a, b in zip(costs, costs[1:]))
        checks = [pate.rdp_threshold([k, 400 - k], 250.0, sigma, DEFAULT_ORDERS) for k in range(250, 401, 5)]
        assert all(np.all(b <= a + 1e-15) for a, b in zip(checks, checks[1:]))


@pytest.mark.parametrize("threshold", [3.0, 5.4, 6.0])  # 0.5, 0.9 and all of the 6 teachers
@pytest.mark.parametrize("sigma1", [0.5, 2.0, 30.0])
def test_cheapest_threshold_check_is_the_least_over_every_vote(threshold, sigma1):
    # 6 teachers over 3 bins: every one of the 28 histograms, by brute force (top votes 2 to 6)
    histograms = [(a, b, 6 - a - b) for a in range(7) for b in range(7 - a)]
    every = np.stack([pate.rdp_threshold(v, threshold, sigma1, DEFAULT_ORDERS) for v in histograms])
    cheapest = pate.rdp_threshold_cheapest(6, 3, threshold, sigma1, DEFAULT_ORDERS)
    np.testing.assert_allclose(cheapest, every.min(axis=0), rtol=1e-12)
    assert np.all(cheapest <= pate.rdp_threshold_data_independent(sigma1, DEFAULT_ORDERS))


def test_cheapest_threshold_check_by_hand():
    # all 6 teachers needed, sigma1 = 0.5: the even split (top vote 2) passes with probability Phi(-8), the
    # least likely outcome of any vote, so q = Phi(-8); Theorem 5 with noise sqrt(2) * 0.5 (as the check above)
    cheapest = pate.rdp_threshold_cheapest(6, 3, 6.0, 0.5, [2.0, 3.0])
    for lam, value in zip([2.0, 3.0], cheapest):
        assert value == pytest.approx(theorem5_by_hand(phi(-8.0), math.sqrt(2) * 0.5, lam), rel=1e-6)
    assert cheapest[0] < 1e-6 * pate.rdp_threshold([6, 0, 0], 6.0, 0.5, [2.0])[0]  # unanimous: q = 1/2


def test_confident_gnmax_query():
    votes, t, s1, s2 = [90, 5, 5], 60.0, 10.0, 8.0
    threshold = pate.rdp_threshold(votes, t, s1, DEFAULT_ORDERS)
    np.testing.assert_allclose(pate.rdp_confident_gnmax(votes, t, s1, s2, DEFAULT_ORDERS, answered=False), threshold)
    np.testing.assert_allclose(pate.rdp_confident_gnmax(votes, t, s1, s2, DEFAULT_ORDERS, answered=True),
                               threshold + pate.rdp_gnmax(votes, s2, DEFAULT_ORDERS))


def test_batch_is_the_sum_of_single_queries():
    rng = np.random.default_rng(2)
    votes = rng.multinomial(200, rng.dirichlet(np.ones(10) * 0.2, size=30))
    answered = rng.random(30) < 0.5
    dd, di = pate.rdp_confident_gnmax_batch(votes, 100.0, 30.0, 20.0, DEFAULT_ORDERS, answered)
    singles = sum(pate.rdp_confident_gnmax(v, 100.0, 30.0, 20.0, DEFAULT_ORDERS, a) for v, a in zip(votes, answered))
    np.testing.assert_allclose(dd, singles, rtol=1e-12)
    # data-independent: 30 threshold checks + (number answered) GNMax steps
    np.testing.assert_allclose(di, 30 * DEFAULT_ORDERS / (2 * 30.0**2) + answered.sum() * DEFAULT_ORDERS / 20.0**2)
    assert np.all(dd <= di)


def test_batch_data_independent_by_hand():
    # 3 queries, 2 answered, sigma1 = 10, sigma2 = 5, order 2: 3 * 2/200 + 2 * 2/25 = 0.03 + 0.16 = 0.19
    _, di = pate.rdp_confident_gnmax_batch([[3, 0], [2, 1], [0, 3]], 2.0, 10.0, 5.0, [2.0], [True, False, True])
    assert di[0] == pytest.approx(0.19)


def test_errors():
    with pytest.raises(ValueError, match="sigma"):
        pate.rdp_gnmax([3, 1], 0.0, [2.0])
    with pytest.raises(ValueError, match="sigma1"):
        pate.rdp_threshold([3, 1], 2.0, -1.0, [2.0])
    with pytest.raises(ValueError, match="2 classes"):
        pate.log_q_gnmax([3], 1.0)
    with pytest.raises(ValueError):
        pate.rdp_gnmax([3, -1], 1.0, [2.0])
    with pytest.raises(ValueError, match="answered"):
        pate.rdp_confident_gnmax_batch([[3, 1], [2, 2]], 2.0, 1.0, 1.0, [2.0], [True])
