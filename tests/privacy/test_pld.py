"""privacy.pld (dp_accounting's PLD accountant) and the ledger's conversion="pld", against independent
computations: the closed-form (eps, delta) of Gaussian DP (Dong et al. 2022 Cor. 2.13, our gdp module checked by
hand in test_gdp) and Opacus' PRV accountant (Gopi et al. 2021), a different numerical method."""
import math
import warnings

import numpy as np
import pytest
from opacus.accountants import PRVAccountant

from dpgen.privacy import pld
from dpgen.privacy.dpsgd import rdp_subsampled_gaussian
from dpgen.privacy.gdp import eps_from_gdp
from dpgen.privacy.ledger import PrivacyLedger
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp

DELTA = 1e-5


def prv_epsilon(history):
    """Opacus' PRV accountant over [(noise_multiplier, sample_rate, steps)], to within 1e-3."""
    accountant = PRVAccountant()
    accountant.history = list(history)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return accountant.get_epsilon(DELTA, eps_error=1e-3)


def assert_close_above(eps, reference):
    """Our PLD epsilon is an upper bound from a pessimistic discretization: not below the reference (within its
    1e-3 error), and above it by at most the discretization's measured excess (0.03 at many steps, pld.py)."""
    assert reference - 2e-3 <= eps <= reference + 0.04


@pytest.mark.parametrize("sigma, count", [(2.0, 1), (300.0, 38_400), (50.0, 7)])
def test_gaussians_compose_to_the_closed_form(sigma, count):
    # count Gaussians of noise sigma (sensitivity 1) are exactly (sqrt(count) / sigma)-GDP
    exact = eps_from_gdp(math.sqrt(count) / sigma, DELTA)
    eps = pld.epsilon_pld([({"kind": "gaussian", "noise_multiplier": sigma}, count)], DELTA)
    assert exact - 1e-9 <= eps <= exact + 5e-3  # pessimistic discretization: never below, barely above


def test_below_the_noise_floor_epsilon_is_infinite_and_at_it_the_closed_form():
    # a noise-free control's releases (noise 0.001): inf, an upper bound, without building a PLD of gigabytes
    tiny = [({"kind": "gaussian", "noise_multiplier": 1.0}, 1), (pld.dpsgd_event(0.01, 0.001), 395)]
    assert pld.epsilon_pld(tiny, DELTA) == math.inf
    floor = pld.MIN_NOISE_MULTIPLIER
    exact = eps_from_gdp(1 / floor, DELTA)  # one Gaussian at the floor: (1 / floor)-GDP, eps 284 at 1e-5
    assert exact > 200
    assert exact - 1e-9 <= pld.epsilon_pld([({"kind": "gaussian", "noise_multiplier": floor}, 1)], DELTA) <= exact + 5e-3


def test_sampling_everything_is_the_plain_gaussian():
    plain = pld.epsilon_pld([({"kind": "gaussian", "noise_multiplier": 1.5}, 20)], DELTA)
    assert pld.epsilon_pld([(pld.dpsgd_event(1.0, 1.5), 20)], DELTA) == pytest.approx(plain, rel=1e-6)


@pytest.mark.parametrize("q, sigma, steps", [(0.01, 1.12, 1000), (128 / 60_000, 0.4, 300), (64 / 60_000, 1.1, 16_160)])
def test_dpsgd_agrees_with_opacus_prv_and_beats_rdp(q, sigma, steps):
    eps = pld.epsilon_pld([(pld.dpsgd_event(q, sigma), steps)], DELTA)
    assert_close_above(eps, prv_epsilon([(sigma, q, steps)]))
    rdp = eps_from_rdp(rdp_subsampled_gaussian(q, sigma, steps, DEFAULT_ORDERS), DEFAULT_ORDERS, DELTA, "improved")[0]
    assert eps < rdp


def test_pate_triplegan_mix_agrees_with_opacus_prv():
    """Paper settings, 300 steps: 38,400 threshold checks (sigma1 = 300), as many answered votes (sigma2 = 300,
    sensitivity sqrt 2), 300 DP-SGD steps at noise 0.4. Gaussians enter PRV as sample rate 1."""
    q, mu = 128 / 60_000, math.sqrt(38_400 * (1 + 2)) / 300
    eps = pld.epsilon_pld(pld.compose_gdp([(pld.dpsgd_event(q, 0.4), 300)], mu), DELTA)
    assert_close_above(eps, prv_epsilon([(0.4, q, 300), (1 / mu, 1.0, 1)]))
    assert 5 < eps < 12


def test_event_errors():
    for bad in [{"kind": "laplace", "scale": 1.0}, {"kind": "gaussian"}, {"kind": "gaussian", "noise_multiplier": 0.0},
                {"kind": "poisson_gaussian", "sample_rate": 1.5, "noise_multiplier": 1.0},
                {"kind": "gaussian", "noise_multiplier": 1.0, "sample_rate": 0.1}]:
        with pytest.raises(ValueError):
            pld.check_event(bad)
    with pytest.raises(ValueError, match="count"):
        pld.epsilon_pld([(pld.dpsgd_event(0.1, 1.0), 1.5)], DELTA)


def dpsgd_ledger(steps=100, q=0.01, sigma=1.0):
    ledger = PrivacyLedger()
    for _ in range(steps):
        ledger.record("dpsgd", {"data_independent": rdp_subsampled_gaussian(q, sigma, 1, ledger.orders)},
                      event=pld.dpsgd_event(q, sigma))
    return ledger


def test_ledger_composes_every_release_under_pld():
    ledger = dpsgd_ledger()
    ledger.record_gdp("votes", 0.5, count=4)  # sqrt(4 * 0.25) = 1-GDP
    direct = pld.epsilon_pld([(pld.dpsgd_event(0.01, 1.0), 100), ({"kind": "gaussian", "noise_multiplier": 1.0}, 1)],
                             DELTA)
    for bound in ("data_dependent", "data_independent"):
        assert ledger.epsilon(DELTA, bound, "pld") == (pytest.approx(direct, rel=1e-9), None)
    assert ledger.epsilon(DELTA, conversion="pld")[0] < ledger.epsilon(DELTA, conversion="improved")[0]
    summary = ledger.summary(DELTA)
    assert summary["total"]["data_independent"]["pld"]["epsilon"] == pytest.approx(direct, rel=1e-9)
    assert summary["mechanisms"]["dpsgd"]["pld_event"] == pld.dpsgd_event(0.01, 1.0)
    alone = pld.epsilon_pld([(pld.dpsgd_event(0.01, 1.0), 100)], DELTA)
    assert summary["mechanisms"]["dpsgd"]["epsilon"]["data_independent"]["pld"]["epsilon"] == pytest.approx(alone)
    with pytest.raises(ValueError, match="hypothetical"):
        ledger.epsilon(DELTA, conversion="pld", extra={"gdp_mu": 1.0})


def test_pld_is_refused_when_a_release_has_no_event():
    ledger = dpsgd_ledger(steps=2)
    ledger.record("gnmax", {"data_independent": np.full(ledger.orders.shape, 0.1)})
    ledger.record_gdp("clt", 0.1, asymptotic=True)
    assert ledger.pld_missing() == ["clt", "gnmax"] and "pld" not in ledger.conversions()
    assert "pld" not in ledger.summary(DELTA)["total"]["data_independent"]
    with pytest.raises(ValueError, match=r"\['clt', 'gnmax'\]"):
        ledger.epsilon(DELTA, conversion="pld")
    with pytest.raises(ValueError, match="PLD event"):
        ledger.record("dpsgd", {"data_independent": np.zeros(ledger.orders.shape)}, event=pld.dpsgd_event(0.02, 1.0))


def test_state_dict_keeps_the_events():
    ledger = dpsgd_ledger(steps=3)
    copy = PrivacyLedger()
    copy.load_state_dict(ledger.state_dict())
    assert copy.epsilon(DELTA, conversion="pld") == ledger.epsilon(DELTA, conversion="pld")
    old = ledger.state_dict()
    del old["rdp"]["dpsgd"]["event"]  # a checkpoint written before events existed
    copy.load_state_dict(old)
    assert copy.pld_missing() == ["dpsgd"]


def test_the_pld_composition_is_dp_accountings_accountant():
    """epsilon_pld composes the PLDs itself (so that REPLACE_ONE pairs can join); for add-or-remove events it is
    the PLDAccountant's composition, number for number."""
    import dp_accounting
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    accountant = PLDAccountant(value_discretization_interval=pld.DISCRETIZATION)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 100)
    accountant.compose(dp_accounting.GaussianDpEvent(2.0), 3)
    events = [(pld.dpsgd_event(0.01, 1.0), 100), ({"kind": "gaussian", "noise_multiplier": 2.0}, 3)]
    assert pld.epsilon_pld(events, DELTA) == accountant.get_epsilon(DELTA)


def mixture_delta(eps, q, s, sign):
    """H_{e^eps}(P || Q) by quadrature for P = q N(-sign, s^2) + (1-q) N(0, s^2), Q = q N(sign, s^2) + (1-q) N(0, s^2)."""
    from scipy.integrate import quad
    from scipy.stats import norm

    def p(x):
        return q * norm.pdf(x, -sign, s) + (1 - q) * norm.pdf(x, 0, s)

    def r(x):
        return q * norm.pdf(x, sign, s) + (1 - q) * norm.pdf(x, 0, s)

    return quad(lambda x: max(0.0, p(x) - math.exp(eps) * r(x)), -12 * s - 2, 12 * s + 2, points=[-1, 0, 1],
                limit=400, epsabs=1e-15, epsrel=1e-12)[0]


@pytest.mark.parametrize("eps", [0.3, 1.0, 2.5])
def test_the_replace_event_is_the_pair_of_docs_privacy_and_dominates_the_amplified_profile(eps):
    """docs/PRIVACY.md (GS-WGAN): the event is q N(-1) + (1-q) N(0) against q N(1) + (1-q) N(0), symmetric, and its
    profile is at least q delta_G(gamma), gamma = 1 + (e^eps - 1) / q, delta_G that of N(-1) against N(0): the bound
    advanced joint convexity gives for the step it stands for."""
    q, s = 0.1, 1.0
    exact = mixture_delta(eps, q, s, 1.0)
    assert exact == pytest.approx(mixture_delta(eps, q, s, -1.0), rel=1e-9)  # symmetric: (Q || P) the same
    ours = pld.epsilon_pld([({"kind": "replace_poisson_gaussian", "sample_rate": q, "noise_multiplier": s}, 1)], exact)
    assert eps - 1e-6 <= ours <= eps + 0.01  # pessimistic discretization: above, and close
    base = math.log1p((math.exp(eps) - 1) / q)
    mu = 1.0 / s
    delta_g = norm_cdf(-base / mu + mu / 2) - math.exp(base) * norm_cdf(-base / mu - mu / 2)
    assert exact >= q * delta_g * (1 - 1e-9)


def norm_cdf(x):
    return 0.5 * math.erfc(-x / math.sqrt(2))
