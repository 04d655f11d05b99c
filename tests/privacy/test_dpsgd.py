import dp_accounting
import pytest

from dpgen.privacy.dpsgd import rdp_subsampled_gaussian
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp


def test_full_batch_is_the_gaussian_mechanism():
    # q = 1: steps * a / (2 sigma^2); sigma 2, 3 steps, a = 2 -> 3 * 2 / 8 = 0.75
    assert rdp_subsampled_gaussian(1.0, 2.0, 3, [2.0])[0] == pytest.approx(0.75)


@pytest.mark.parametrize("q, sigma, steps", [(0.01, 1.1, 1000), (256 / 60000, 0.7, 5000), (0.05, 2.0, 300)])
def test_opacus_and_dp_accounting_agree(q, sigma, steps):
    ours = rdp_subsampled_gaussian(q, sigma, steps, DEFAULT_ORDERS)
    accountant = dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    reference, reference_order = accountant.get_epsilon_and_optimal_order(1e-5)
    eps, order = eps_from_rdp(ours, DEFAULT_ORDERS, 1e-5, "improved")
    assert eps == pytest.approx(reference, rel=1e-6) and order == reference_order


def test_errors():
    with pytest.raises(ValueError):
        rdp_subsampled_gaussian(1.5, 1.0, 1, [2.0])
    with pytest.raises(ValueError):
        rdp_subsampled_gaussian(0.1, 0.0, 1, [2.0])
    with pytest.raises(ValueError):
        rdp_subsampled_gaussian(0.1, 1.0, 1.5, [2.0])
