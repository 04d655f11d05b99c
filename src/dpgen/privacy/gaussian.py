"""One Gaussian release calibrated to a budget: the noise std of the analytic Gaussian mechanism, and the noise std
that a PrivacyLedger conversion needs to report the budget for it (DP-MERF's mean embedding, methods/dpmerf.py)."""

from __future__ import annotations

from .gdp import delta_from_gdp, mu_gaussian
from .ledger import PrivacyLedger
from .rdp import check_delta

RELATIVE_TOLERANCE = 1e-10


def smallest_fitting(fits, scale: float, tolerance: float = RELATIVE_TOLERANCE) -> float:
    """Smallest sigma > 0 (to a relative `tolerance`, rounded up) with fits(sigma), for a fits that fails below some
    sigma and holds above it; `scale` is where the search starts."""
    high = scale
    while not fits(high):
        high *= 2.0
    low = high / 2.0
    while fits(low):
        low, high = low / 2.0, low
    while high - low > tolerance * high:  # invariant: fits(high), not fits(low)
        mid = 0.5 * (low + high)
        low, high = (low, mid) if fits(mid) else (mid, high)
    return high


def _check(epsilon: float, delta: float, sensitivity: float) -> tuple[float, float, float]:
    if not epsilon > 0 or not sensitivity > 0:
        raise ValueError(f"need epsilon > 0 and sensitivity > 0, got {epsilon}, {sensitivity}")
    return float(epsilon), check_delta(delta), float(sensitivity)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise std sigma such that x + N(0, sigma^2 I), for a statistic of L2 sensitivity Delta, is
    (epsilon, delta)-DP. Balle & Wang 2018 (ICML), Theorem 8: it is iff
    Phi(Delta / (2 sigma) - eps sigma / Delta) - e^eps Phi(-Delta / (2 sigma) - eps sigma / Delta) <= delta;
    with mu = Delta / sigma this is the mu-GDP curve of gdp.delta_from_gdp (Dong et al. 2022, Cor. 2.13).
    The left side falls as sigma grows, so bisection; the sigma returned is on the private side."""
    epsilon, delta, sensitivity = _check(epsilon, delta, sensitivity)
    return smallest_fitting(lambda sigma: delta_from_gdp(mu_gaussian(sensitivity, sigma), epsilon) <= delta,
                             sensitivity)


def ledger_epsilon(mu: float, delta: float, conversion: str) -> float:
    """epsilon at delta that a PrivacyLedger reports, under `conversion`, for one mu-GDP release (a Gaussian
    release with sensitivity / sigma = mu, recorded with `record_gdp`)."""
    ledger = PrivacyLedger()
    ledger.record_gdp("gaussian", mu)
    return ledger.epsilon(delta, "data_independent", conversion)[0]


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float, conversion: str = "gdp") -> float:
    """Noise std of one Gaussian release (L2 sensitivity `sensitivity`) that a PrivacyLedger reports as
    epsilon <= `epsilon` at `delta` under `conversion`: the analytic Gaussian mechanism for "gdp" (that
    conversion is exact for a Gaussian release, so the report equals the budget); for the RDP conversions
    ("classical", "improved"), which overstate a Gaussian's epsilon, the larger sigma at which they reach the
    budget, so that the run's own report stays within it."""
    epsilon, delta, sensitivity = _check(epsilon, delta, sensitivity)
    analytic = analytic_gaussian_sigma(epsilon, delta, sensitivity)
    if conversion == "gdp":
        return analytic
    # a sound conversion never reports less than the exact epsilon, so its sigma is >= the analytic one
    return smallest_fitting(
        lambda sigma: ledger_epsilon(mu_gaussian(sensitivity, sigma), delta, conversion) <= epsilon, analytic)
