"""Privacy loss distributions: a tight and sound (eps, delta) for compositions of Gaussian and Poisson-subsampled
Gaussian releases, by Google's dp_accounting PLD accountant (Koskela et al. 2020; Doroshenko et al. 2022).

RDP overstates epsilon badly at small noise (PATE-TripleGAN's DP-SGD noise 0.4); the PLD of those releases is
composed exactly up to a pessimistic discretization, so its epsilon is an upper bound, not an approximation like
the central-limit mu of Bu et al. 2020. A release is described by a plain dict (kept in ledgers and checkpoints):
  {"kind": "gaussian", "noise_multiplier": s}                         N(0, (s * sensitivity)^2) added once;
  {"kind": "poisson_gaussian", "sample_rate": q, "noise_multiplier": s}  one DP-SGD step (Poisson rate q);
  {"kind": "replace_poisson_gaussian", "sample_rate": q, "noise_multiplier": s}  dp_accounting's Poisson-subsampled
      Gaussian pair under REPLACE_ONE, q N(-1) + (1-q) N(0) against q N(1) + (1-q) N(0) (std s): a step it dominates
      (GS-WGAN's, docs/methods/gswgan.md) composes with the others as that pair.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .dpsgd import check_sampled_gaussian
from .rdp import check_delta

KINDS = {"gaussian": ("noise_multiplier",), "poisson_gaussian": ("sample_rate", "noise_multiplier"),
         "replace_poisson_gaussian": ("sample_rate", "noise_multiplier")}
# Pessimistic discretization of the privacy loss: epsilon stays an upper bound, a little above the exact value.
# Measured against 1e-4 (3-12x slower): +4e-5 at PATE-TripleGAN's paper settings (300 steps, eps 9.13), +0.03
# at DP-GAN's (16,160 steps at q = 64/60000, sigma 1.1, eps 0.56).
DISCRETIZATION = 1e-3
# Below this noise multiplier the privacy loss spans ~1 / (2 s^2) nats, so its discretized PLD needs gigabytes (a
# noise-free control at s = 0.001 was killed for memory at 22 GB) for an epsilon that says nothing: one Gaussian
# release at s = 0.05 alone is eps 284 at delta 1e-5, with 395 DP-SGD steps (q = 128 / 60,000) at s = 0.05 beside
# it 1,587 (5 s, 0.5 GB).
# Such compositions are reported as eps = inf, an upper bound.
MIN_NOISE_MULTIPLIER = 0.05


def check_event(event: dict) -> dict:
    """The event as a plain dict of floats, or ValueError naming what is wrong."""
    if not isinstance(event, dict) or event.get("kind") not in KINDS:
        raise ValueError(f"a PLD event is a dict with kind in {sorted(KINDS)}, got {event!r}")
    fields = KINDS[event["kind"]]
    if set(event) != {"kind", *fields}:
        raise ValueError(f"a {event['kind']!r} event has exactly the fields {fields}, got {sorted(event)}")
    plain = {"kind": event["kind"], **{f: float(event[f]) for f in fields}}
    check_sampled_gaussian(plain.get("sample_rate", 1.0), plain["noise_multiplier"], 1)
    return plain


def gaussian_of_mu(mu: float) -> dict:
    """mu-GDP is exactly the Gaussian mechanism with sensitivity 1 and noise std 1 / mu (Dong et al. 2022)."""
    if not mu > 0:
        raise ValueError(f"mu must be > 0, got {mu}")
    return {"kind": "gaussian", "noise_multiplier": 1.0 / float(mu)}


def dpsgd_event(sample_rate: float, noise_multiplier: float) -> dict:
    """One DP-SGD step: Poisson sampling at `sample_rate`, Gaussian noise std noise_multiplier x clip norm."""
    return check_event({"kind": "poisson_gaussian", "sample_rate": sample_rate, "noise_multiplier": noise_multiplier})


def _pld_of(event: dict, count: int):
    """The PLD of `count` releases of `event`, as dp_accounting's PLDAccountant composes its DpEvents: a Gaussian
    `count` times is one Gaussian of std s / sqrt(count); a subsampled one is self-composed."""
    # imported here: dp_accounting loads in about a second, and only PLD users need it
    from dp_accounting import NeighboringRelation
    from dp_accounting.pld.privacy_loss_distribution import from_gaussian_mechanism

    s = event["noise_multiplier"]
    if event["kind"] == "gaussian":
        return from_gaussian_mechanism(s / math.sqrt(count), value_discretization_interval=DISCRETIZATION)
    relation = (NeighboringRelation.REPLACE_ONE if event["kind"] == "replace_poisson_gaussian"
                else NeighboringRelation.ADD_OR_REMOVE_ONE)
    return from_gaussian_mechanism(s, value_discretization_interval=DISCRETIZATION, sampling_prob=event["sample_rate"],
                                   neighboring_relation=relation).self_compose(count)


def epsilon_pld(events: Iterable[tuple[dict, int]], delta: float) -> float:
    """Smallest eps such that the composition of `count` releases of each event is (eps, delta)-DP
    (add-or-remove-one neighbours, as Opacus' DP-SGD accountants; a replace_poisson_gaussian event is the pair
    that dominates its step under them). Equal events are composed as one, their counts added, so that the
    epsilon of n steps does not depend on how the releases were grouped."""
    from dp_accounting.pld.privacy_loss_distribution import identity

    delta = check_delta(delta)
    composed = [(dict(key), count) for key, count in merged(events).items()]
    if any(event["noise_multiplier"] < MIN_NOISE_MULTIPLIER for event, _ in composed):
        return float("inf")
    total = identity(value_discretization_interval=DISCRETIZATION)
    for event, count in composed:
        total = total.compose(_pld_of(event, count))
    return max(float(total.get_epsilon_for_delta(delta)), 0.0)


def merged(events: Iterable[tuple[dict, int]]) -> dict[tuple, int]:
    """(event, count) pairs as {event's items: total count}, counts of 0 left out: equal releases compose as one."""
    counts: dict[tuple, int] = {}
    for event, count in events:
        if int(count) != count or count < 0:
            raise ValueError(f"count must be a non-negative integer, got {count}")
        if count:
            key = tuple(check_event(event).items())
            counts[key] = counts.get(key, 0) + int(count)
    return counts


def compose_gdp(events: Iterable[tuple[dict, int]], mu: float) -> list[tuple[dict, int]]:
    """`events` plus one mu-GDP release (nothing added for mu = 0)."""
    events = list(events)
    return events + [(gaussian_of_mu(mu), 1)] if mu > 0 else events
