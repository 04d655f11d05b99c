"""privacy/gaussian.py: the analytic Gaussian mechanism's sigma against independent computations, and the sigma
that makes a ledger conversion report exactly the budget."""
import dp_accounting
import pytest
from dp_accounting import gaussian_mechanism
from dp_accounting.pld import privacy_loss_distribution

from dpgen.privacy.gaussian import analytic_gaussian_sigma, gaussian_sigma, ledger_epsilon
from dpgen.privacy.rdp import DEFAULT_ORDERS

CASES = [(1.0, 1e-5), (0.5, 1e-6), (2.0, 1e-5), (8.0, 1e-5), (0.2, 1e-3)]


def pld_epsilon(sigma: float, delta: float, pessimistic: bool) -> float:
    """dp_accounting's PLD of one Gaussian (sensitivity 1): an upper bound (pessimistic) or a lower bound."""
    pld = privacy_loss_distribution.from_gaussian_mechanism(sigma, pessimistic_estimate=pessimistic,
                                                              use_connect_dots=pessimistic)
    return pld.get_epsilon_for_delta(delta)


@pytest.mark.parametrize("epsilon, delta", CASES)
def test_analytic_sigma_is_the_smallest_one_dp_accounting_finds_private(epsilon, delta):
    sigma = analytic_gaussian_sigma(epsilon, delta)
    # the same theorem, implemented independently (in log space, by brentq)
    assert sigma == pytest.approx(gaussian_mechanism.get_sigma_gaussian(epsilon, delta), rel=1e-8)
    # the PLD accountant (another method altogether): at sigma the epsilon is the target ...
    assert epsilon - 1e-3 <= pld_epsilon(sigma, delta, pessimistic=True) <= epsilon + 1e-9
    assert pld_epsilon(sigma, delta, pessimistic=False) <= epsilon
    # ... and 0.5% less noise is provably over it (the optimistic PLD is a lower bound on epsilon)
    assert pld_epsilon(0.995 * sigma, delta, pessimistic=False) > epsilon


def test_sigma_scales_with_the_sensitivity():
    assert analytic_gaussian_sigma(1.0, 1e-5, 2.5) == pytest.approx(2.5 * analytic_gaussian_sigma(1.0, 1e-5), rel=1e-9)


def test_published_value():
    # OpenDP (github.com/opendp/opendp, rust/src/meas/gaussian/mod.rs, test_make_gaussian_mechanism_analytic):
    # sensitivity 1, (1, 1e-5): scale 3.730632 satisfies Balle & Wang's Theorem 8, 3.730632 - 1e-6 does not
    assert 3.730631 < analytic_gaussian_sigma(1.0, 1e-5) <= 3.730632


@pytest.mark.parametrize("epsilon, delta", CASES)
@pytest.mark.parametrize("conversion", ["gdp", "classical", "improved"])
def test_the_ledger_reports_the_budget_at_the_calibrated_sigma(epsilon, delta, conversion):
    sensitivity = 1.02
    sigma = gaussian_sigma(epsilon, delta, sensitivity, conversion)
    reported = ledger_epsilon(sensitivity / sigma, delta, conversion)
    assert epsilon * (1 - 1e-6) <= reported <= epsilon
    assert sigma >= analytic_gaussian_sigma(epsilon, delta, sensitivity) * (1 - 1e-12)  # never below the exact one


@pytest.mark.parametrize("epsilon, delta", CASES[:3])
def test_improved_conversion_agrees_with_dp_accountings_rdp_accountant(epsilon, delta):
    sigma = gaussian_sigma(epsilon, delta, 1.0, "improved")
    accountant = dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))
    accountant.compose(dp_accounting.GaussianDpEvent(sigma))
    assert accountant.get_epsilon(delta) == pytest.approx(epsilon, rel=1e-6)


def test_bad_arguments_are_refused():
    for args in [(0.0, 1e-5, 1.0), (1.0, 0.0, 1.0), (1.0, 1e-5, 0.0)]:
        with pytest.raises(ValueError):
            analytic_gaussian_sigma(*args)
