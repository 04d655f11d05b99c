"""PATE-GAN's Laplace PATE moments accountant (PATE-GAN appendix Theorem 5)."""

import math

import mpmath as mp
import numpy as np
import pytest

from dpgen.privacy import pategan
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp

# votes (10, 4), lam = 0.5: gap 6, q = (2 + 0.5 * 6) / (4 e^{0.5 * 6}) = 5 / (4 * 20.085537) = 0.0622338
Q = 5 / (4 * math.exp(3))


def alpha_by_hand(q, lam, l):
    """Theorem 5 (Papernot et al. 2017 Thm. 3): log((1-q) ((1-q)/(1-e^{2lam} q))^l + q e^{2 lam l})."""
    return math.log((1 - q) * ((1 - q) / (1 - math.exp(2 * lam) * q)) ** l + q * math.exp(2 * lam * l))


def test_log_q_by_hand():
    assert Q == pytest.approx(0.0622338, abs=1e-7)
    assert pategan.log_q_laplace([10, 4], 0.5) == pytest.approx(math.log(Q))


def test_moments_by_hand():
    # validity: q = 0.0622 < (e^1 - 1)/(e^2 - 1) = 1/(e + 1) = 0.2689.
    # l = 1 (order 2): (1-q)^2 / (1 - e q) + q e = 0.879405/0.830831 + 0.169169 = 1.227634 -> alpha 0.205089
    # l = 2 (order 3): (1-q) (0.937766/0.830831)^2 + q e^2 = 1.654561 -> alpha 0.503528, RDP = alpha/2 = 0.251764.
    # Data-independent: 2 lam^2 a = 0.5 a.
    rdp = pategan.rdp_laplace_pate([10, 4], 0.5, [1.5, 2.0, 3.0, 4.0])
    assert rdp[0] == pytest.approx(0.75)  # order 1.5 is no integer moment: data-independent 0.5 * 1.5
    assert rdp[1] == pytest.approx(alpha_by_hand(Q, 0.5, 1)) and rdp[1] == pytest.approx(0.205089, abs=1e-6)
    assert rdp[2] == pytest.approx(alpha_by_hand(Q, 0.5, 2) / 2) and rdp[2] == pytest.approx(0.251764, abs=1e-6)
    assert rdp[3] == pytest.approx(alpha_by_hand(Q, 0.5, 3) / 3)


def test_validity_condition_falls_back_to_data_independent():
    # tie: q = 2 / 4 = 0.5 >= 1/(e + 1): Theorem 3 does not apply
    np.testing.assert_allclose(pategan.rdp_laplace_pate([5, 5], 0.5, DEFAULT_ORDERS), 0.5 * DEFAULT_ORDERS)
    # the bound q < (e^{2lam}-1)/(e^{4lam}-1) matters: gap 2 with lam = 0.5 gives q = 3/(4e) = 0.276 > 0.2689
    assert pategan.log_q_laplace([6, 4], 0.5) > math.log(1 / (math.e + 1))
    np.testing.assert_allclose(pategan.rdp_laplace_pate([6, 4], 0.5, DEFAULT_ORDERS), 0.5 * DEFAULT_ORDERS)


def test_tail_bound_is_the_classical_conversion():
    # PATE-GAN Algorithm 1: eps = min_l (alpha(l) + log(1/delta)) / l over l = 1..L with alpha summed over
    # queries; 100 queries at votes (10, 4), delta 1e-5, L = 50.
    delta = 1e-5
    alphas = [100 * min(2 * 0.25 * l * (l + 1), alpha_by_hand(Q, 0.5, l)) for l in range(1, 51)]
    by_paper = min((a + math.log(1 / delta)) / l for l, a in zip(range(1, 51), alphas))
    orders = np.arange(2.0, 52.0)
    eps, _ = eps_from_rdp(100 * pategan.rdp_laplace_pate([10, 4], 0.5, orders), orders, delta)
    assert eps == pytest.approx(by_paper)


def test_more_consensus_never_costs_more_and_never_above_data_independent():
    lam = 0.2
    costs = [pategan.rdp_laplace_pate([50 + k, 50 - k], lam, DEFAULT_ORDERS) for k in range(0, 51)]
    assert all(np.all(b <= a + 1e-12) for a, b in zip(costs, costs[1:]))
    assert all(np.all(c <= pategan.rdp_laplace_pate_data_independent(lam, DEFAULT_ORDERS)) for c in costs)


class ScaleRecorder:
    def laplace(self, loc, scale, size):
        self.scale = scale
        return np.zeros(size)


@pytest.mark.parametrize("teachers, lam", [(1, 0.5), (7, 0.5), (20, 0.2), (40, 1.0)])
def test_cheapest_query_is_the_least_over_every_vote(teachers, lam):
    every = np.stack([pategan.rdp_laplace_pate([teachers - k, k], lam, DEFAULT_ORDERS) for k in range(teachers + 1)])
    np.testing.assert_array_equal(pategan.rdp_laplace_pate_cheapest(teachers, lam, DEFAULT_ORDERS), every.min(axis=0))


def test_noise_scale_is_the_inverse_of_lam():
    rng = ScaleRecorder()
    assert pategan.laplace_vote([3, 9], 0.25, rng) == 1
    assert rng.scale == 4.0


def test_errors():
    with pytest.raises(ValueError):
        pategan.rdp_laplace_pate([3, 1], 0.0, [2.0])
    with pytest.raises(ValueError):
        pategan.log_q_laplace([3], 1.0)



def test_large_lam_stays_finite_and_matches_high_precision():
    # lam = 1000 (the noise-free controls' vote noise of scale 0.001): e^{4 lam} overflows a float, the validity
    # bound 1 / (e^{2 lam} + 1) = e^{-2000} does not in logs. A unanimous vote of 100 has q = (2 + 1e5) / 4 e^{-1e5},
    # far below it, so every integer moment takes Theorem 3's value, here computed again in 60-digit arithmetic.
    lam, orders = 1000.0, DEFAULT_ORDERS
    with np.errstate(over="raise", invalid="raise"):
        rdp = pategan.rdp_laplace_pate([100, 0], lam, orders)
    with mp.workdps(60):
        q = (2 + mp.mpf(lam) * 100) / (4 * mp.exp(lam * 100))
        for a, got in zip(orders, rdp):
            l = a - 1
            if l >= 1 and l == round(l):
                alpha = mp.log((1 - q) * ((1 - q) / (1 - mp.exp(2 * lam) * q)) ** int(l) + q * mp.exp(2 * lam * l))
                assert got == pytest.approx(float(min(alpha / l, 2 * lam**2 * a)), rel=1e-9, abs=1e-300)
            else:
                assert got == pytest.approx(2 * lam**2 * a)
    assert rdp[orders == 2.0] == 0.0 and rdp[orders == 51.0] > 0  # log q + 2 lam l turns positive at l = 50
    with np.errstate(over="raise", invalid="raise"):  # a tie stays data-independent
        np.testing.assert_allclose(pategan.rdp_laplace_pate([50, 50], lam, orders), 2 * lam**2 * orders)
