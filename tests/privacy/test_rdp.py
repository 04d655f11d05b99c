import math
import warnings

import numpy as np
import pytest
from opacus.accountants.analysis.rdp import get_privacy_spent

from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp


def test_default_orders_grid():
    assert DEFAULT_ORDERS[:3].tolist() == [1.1, 1.5, 2.0]
    assert set(range(2, 201)) <= set(DEFAULT_ORDERS.tolist())
    assert DEFAULT_ORDERS[-3:].tolist() == [256.0, 512.0, 1024.0]
    assert np.all(np.diff(DEFAULT_ORDERS) > 0)


def test_classical_by_hand():
    # orders (2, 3), rdp (1, 1.2), delta = e^-4: a=2 -> 1 + 4/1 = 5; a=3 -> 1.2 + 4/2 = 3.2 (the min)
    eps, order = eps_from_rdp([1.0, 1.2], [2.0, 3.0], math.exp(-4))
    assert eps == pytest.approx(3.2) and order == 3.0


def test_improved_by_hand():
    # a=2: 1 + log(1/2) - (-4 + log 2)/1 = 5 - 2 log 2 = 3.613706
    # a=3: 1.2 + log(2/3) - (-4 + log 3)/2 = 1.2 - 0.405465 + 1.450694 = 2.245229 (the min)
    eps, order = eps_from_rdp([1.0, 1.2], [2.0, 3.0], math.exp(-4), "improved")
    assert eps == pytest.approx(1.2 + math.log(2 / 3) + (4 - math.log(3)) / 2) and order == 3.0
    assert eps == pytest.approx(2.245229, abs=1e-6)


def test_improved_never_above_classical_and_matches_opacus():
    rng = np.random.default_rng(0)
    for _ in range(20):
        rdp = rng.uniform(0, 2, DEFAULT_ORDERS.size) * DEFAULT_ORDERS / 100
        delta = 10 ** rng.uniform(-9, -3)
        improved, _ = eps_from_rdp(rdp, DEFAULT_ORDERS, delta, "improved")
        assert improved <= eps_from_rdp(rdp, DEFAULT_ORDERS, delta)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # opacus warns when the optimum is an extreme order
            ref, _ = get_privacy_spent(orders=DEFAULT_ORDERS, rdp=rdp, delta=delta)
        assert improved == pytest.approx(max(ref, 0.0), rel=1e-12)


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5, 2.0])
def test_delta_outside_unit_interval(delta):
    with pytest.raises(ValueError, match="delta"):
        eps_from_rdp([1.0], [2.0], delta)


def test_bad_inputs():
    with pytest.raises(ValueError):
        eps_from_rdp([1.0], [1.0], 1e-5)  # order 1 is not an RDP order here
    with pytest.raises(ValueError):
        eps_from_rdp([-1.0], [2.0], 1e-5)
    with pytest.raises(ValueError):
        eps_from_rdp([1.0], [2.0], 1e-5, "tight")
