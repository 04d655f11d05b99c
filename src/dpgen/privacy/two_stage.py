"""A budget shared by one Gaussian release and a DP-SGD stage after it (DP-MERF with a guide, methods/guide.py).

The release is calibrated alone to (share * epsilon, delta) by the analytic Gaussian mechanism (privacy/gaussian.py);
the DP-SGD stage gets the smallest noise multiplier at which the two together are reported by a PrivacyLedger as
at most (epsilon, delta) under the run's conversion. Both are data-independent: the release is (sensitivity /
sigma)-GDP (Dong et al. 2022, Thm. 2.7), the DP-SGD steps are Poisson-subsampled Gaussians (Mironov, Talwar & Zhang
2019, via Opacus), and they compose by adding their RDP curves (Mironov 2017, Prop. 1), the GDP release joining as
the RDP curve a mu^2 / 2 (ledger.py); privacy.json also reports the tighter PLD composition of the same two."""

from __future__ import annotations

import math

from .cost import StepCost
from .dpsgd import check_sampled_gaussian, rdp_subsampled_gaussian
from .gaussian import gaussian_sigma, smallest_fitting
from .gdp import mu_gaussian
from .ledger import GDP_EXTRA, NO_DATA_DEPENDENT_BOUND, PrivacyLedger
from .pld import dpsgd_event
from .rdp import DEFAULT_ORDERS, check_delta

RELEASE = "gaussian_mean_embedding"  # the ledger's names of the two stages (aggregation/mean_embedding.py)
DPSGD = "dpsgd_guide"
CONVERSIONS = ("classical", "improved")  # RDP conversions: the budget is checked before each step at no cost
TOLERANCE = 1e-6  # relative, on the noise multiplier (rounded up: the budget is never exceeded)


def check_share(share: float) -> float:
    share = float(share)
    if not 0.0 < share < 1.0:
        raise ValueError(f"the release's share of the budget must be in (0, 1), got {share}")
    return share


def record_dpsgd(ledger: PrivacyLedger, sample_rate: float, noise_multiplier: float, steps: int, params=None) -> None:
    """`steps` DP-SGD steps in `ledger`: their RDP (Opacus) and their PLD event (privacy/pld.py)."""
    ledger.record(DPSGD, {"data_independent": rdp_subsampled_gaussian(sample_rate, noise_multiplier, steps,
                                                                      ledger.orders)},
                  count=steps, params=params, event=dpsgd_event(sample_rate, noise_multiplier))


def stage_ledger(mu: float, sample_rate: float, noise_multiplier: float, steps: int,
                 orders=DEFAULT_ORDERS) -> PrivacyLedger:
    """A ledger holding a mu-GDP release and `steps` DP-SGD steps: what a guided run spends."""
    ledger = PrivacyLedger(orders, aliases=NO_DATA_DEPENDENT_BOUND)
    ledger.record_gdp(RELEASE, mu)
    record_dpsgd(ledger, sample_rate, noise_multiplier, steps)
    return ledger


def dpsgd_noise_multiplier(epsilon: float, delta: float, mu: float, sample_rate: float, steps: int,
                           conversion: str = "improved", orders=DEFAULT_ORDERS) -> float:
    """Smallest noise multiplier (to TOLERANCE, rounded up) at which a mu-GDP release and then `steps` DP-SGD steps
    at Poisson rate `sample_rate` are (epsilon, delta)-DP by the ledger's `conversion`; ValueError when the release
    alone leaves nothing (no noise, however large, brings the total under epsilon)."""
    if conversion not in CONVERSIONS:
        raise ValueError(f"a guided run is accounted with an RDP conversion {CONVERSIONS}, got {conversion!r}")
    delta = check_delta(delta)
    check_sampled_gaussian(sample_rate, 1.0, steps)
    alone = PrivacyLedger(orders)
    alone.record_gdp(RELEASE, mu)
    if alone.epsilon(delta, "data_independent", conversion)[0] >= epsilon:
        raise ValueError(f"the release alone costs the whole budget epsilon={epsilon:g} under the {conversion} "
                         "conversion: give the release a smaller share")

    def fits(noise: float) -> bool:
        ledger = stage_ledger(mu, sample_rate, noise, steps, orders)
        return ledger.epsilon(delta, "data_independent", conversion)[0] <= epsilon

    return smallest_fitting(fits, 1.0, TOLERANCE)


def release_sigma(epsilon: float, delta: float, sensitivity: float, share: float) -> float:
    """The release's noise: the analytic Gaussian mechanism's sigma at (share x epsilon, delta)."""
    return gaussian_sigma(check_share(share) * epsilon, delta, sensitivity, "gdp")


def dpsgd_steps(epochs: float, sample_rate: float) -> int:
    """DP-SGD steps of `epochs` passes at Poisson rate q: epochs / q, rounded up."""
    return max(1, math.ceil(epochs / sample_rate - 1e-9))


def plan(epsilon: float, delta: float, sensitivity: float, share: float, batch_size: int, epochs: float,
         records: int, conversion: str = "improved", orders=DEFAULT_ORDERS) -> dict:
    """A guided run's noise: the release's sigma at (share x epsilon, delta) by the analytic Gaussian mechanism, then
    the DP-SGD stage's sampling rate batch_size / records, its steps and its noise multiplier (N public)."""
    share = check_share(share)
    if not 1 <= batch_size <= records:
        raise ValueError(f"the guide's batch_size must be in [1, {records}] (the training records), got {batch_size}")
    sigma = release_sigma(epsilon, delta, sensitivity, share)
    mu = mu_gaussian(sensitivity, sigma)
    rate = batch_size / records
    steps = dpsgd_steps(epochs, rate)
    noise = dpsgd_noise_multiplier(epsilon, delta, mu, rate, steps, conversion, orders)
    return {"sigma": sigma, "mu": mu, "sample_rate": rate, "steps": steps, "noise_multiplier": noise}


def step_cost(planned: dict, orders=DEFAULT_ORDERS) -> StepCost:
    """The release and the guide's DP-SGD steps upfront, then generator steps that cost nothing."""
    guide = rdp_subsampled_gaussian(planned["sample_rate"], planned["noise_multiplier"], planned["steps"], orders)
    return StepCost({GDP_EXTRA: 0.0}, orders, aliases=NO_DATA_DEPENDENT_BOUND,
                    upfront={GDP_EXTRA: planned["mu"], "data_independent": guide})
