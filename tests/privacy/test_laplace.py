import math

import dp_accounting
import numpy as np
import pytest

from dpgen.privacy import laplace
from dpgen.privacy.rdp import DEFAULT_ORDERS


def test_scale():
    assert laplace.laplace_scale(2.0, 0.5) == 4.0
    assert laplace.laplace_scale(1.0, 0.01) == pytest.approx(100.0)  # G-PATE's Kaggle class ratio


class ScaleRecorder:
    def laplace(self, loc, scale, size):
        self.scale = scale
        return np.full(size, 1.5)


def test_release_adds_noise_of_the_right_scale():
    rng = ScaleRecorder()
    assert laplace.release(10.0, 1.0, 0.25, rng) == 11.5
    assert rng.scale == 4.0


def test_rdp_by_hand():
    # eps = 1, a = 2: log(2/3 e + 1/3 e^-2) = log(1.812188 + 0.045112) = 0.619124
    value = laplace.rdp_laplace(1.0, [2.0])[0]
    assert value == pytest.approx(math.log(2 / 3 * math.e + 1 / 3 * math.exp(-2)))
    assert value == pytest.approx(0.619124, abs=1e-6)


def test_rdp_matches_dp_accounting_and_stays_below_pure_eps():
    for eps in (0.01, 0.3, 2.0):
        ours = laplace.rdp_laplace(eps, DEFAULT_ORDERS)
        accountant = dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))
        accountant.compose(dp_accounting.LaplaceDpEvent(1.0 / eps))
        np.testing.assert_allclose(ours, accountant._rdp, rtol=1e-9)
        assert np.all(ours <= eps)
        assert np.all(np.diff(ours) >= 0)


def test_errors():
    with pytest.raises(ValueError):
        laplace.laplace_scale(1.0, 0.0)
    with pytest.raises(ValueError):
        laplace.rdp_laplace(-1.0, [2.0])
