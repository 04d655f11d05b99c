"""The budget split of a guided DP-MERF run (privacy/two_stage.py), checked against an independent computation: the
Gaussian release's RDP a mu^2 / 2 plus Opacus' RDP of the DP-SGD steps, converted here by Balle et al. 2020's formula,
and against dp_accounting's PLD accountant (tighter, so never above it)."""
import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld
from opacus.accountants.analysis.rdp import compute_rdp

from dpgen.privacy import two_stage
from dpgen.privacy.rdp import DEFAULT_ORDERS

DELTA = 1e-5


def improved_epsilon(mu: float, q: float, noise: float, steps: int) -> float:
    """Balle et al. 2020, Prop. 12: eps = min_a rdp(a) + log((a - 1) / a) - (log delta + log a) / (a - 1)."""
    a = np.asarray(DEFAULT_ORDERS)
    rdp = a * mu**2 / 2 + np.asarray(compute_rdp(q=q, noise_multiplier=noise, steps=steps, orders=list(a)))
    return float(np.min(rdp + np.log((a - 1) / a) - (math.log(DELTA) + np.log(a)) / (a - 1)))


def pld_epsilon(mu: float, q: float, noise: float, steps: int) -> float:
    accountant = pld.PLDAccountant()
    accountant.compose(dp_event.GaussianDpEvent(1 / mu))
    accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(noise)), steps)
    return accountant.get_epsilon(DELTA)


@pytest.mark.parametrize("epsilon, mu, q, steps", [(1.0, 0.12, 512 / 54_000, 848), (10.0, 0.9, 0.01, 500)])
def test_the_noise_multiplier_is_the_smallest_that_fits_the_budget(epsilon, mu, q, steps):
    noise = two_stage.dpsgd_noise_multiplier(epsilon, DELTA, mu, q, steps, "improved")
    assert improved_epsilon(mu, q, noise, steps) <= epsilon
    assert improved_epsilon(mu, q, noise * (1 - 1e-4), steps) > epsilon  # any less noise is over the budget
    assert pld_epsilon(mu, q, noise, steps) <= epsilon  # the tight accountant agrees it fits
    # the ledger a guided run holds reports the same epsilon
    ledger = two_stage.stage_ledger(mu, q, noise, steps)
    assert ledger.epsilon(DELTA, "data_independent", "improved")[0] == pytest.approx(
        improved_epsilon(mu, q, noise, steps), rel=1e-9)


def test_more_noise_is_needed_when_the_release_takes_more():
    q, steps = 0.01, 300
    small = two_stage.dpsgd_noise_multiplier(1.0, DELTA, 0.05, q, steps)
    large = two_stage.dpsgd_noise_multiplier(1.0, DELTA, 0.2, q, steps)
    assert large > small


def test_a_release_that_spends_the_budget_and_bad_settings_are_refused():
    with pytest.raises(ValueError, match="smaller share"):
        two_stage.dpsgd_noise_multiplier(1.0, DELTA, 5.0, 0.01, 100)
    with pytest.raises(ValueError, match="RDP conversion"):
        two_stage.dpsgd_noise_multiplier(1.0, DELTA, 0.1, 0.01, 100, conversion="gdp")
    for share in (0.0, 1.0, -0.5):
        with pytest.raises(ValueError, match="share"):
            two_stage.check_share(share)
