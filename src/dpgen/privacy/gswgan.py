"""GS-WGAN's gradient sanitization (Chen et al. 2020): its published accounting and a sound one.

One generator step: a discriminator j is drawn uniformly from N_D (each trained on its own disjoint shard);
the gradient of its critic loss w.r.t. each of the B generated samples is clipped to norm C and gets
N(0, (2 C sigma)^2) noise (reference code: SENSITIVITY = 2, noise std = clip * SENSITIVITY * sigma).
A record lives in one shard k, so neighbouring datasets differ only in D_k ("replace one" among the N_D
discriminators), and only when j = k, which happens with probability 1 / N_D (sampling one of N_D without
replacement). Both bounds use the RDP of the sampled-without-replacement Gaussian of Wang, Balle &
Kasiviswanathan 2019 (Theorem 27, as computed by dp-accounting for the replace-one relation):

- "as_published": B such events per step, each with noise multiplier sigma (the GS-WGAN paper's count and
  its script evaluation/privacy_analysis.py: coeff = iterations * batch size, rate 1 / N_D);
- "sound": ONE such event per step whose output is the concatenation of the B sanitized gradients. When j = k
  each of the B gradients can move by 2C, so the concatenation moves by sqrt(B) 2C in L2, against noise
  2C sigma per coordinate: noise multiplier sigma / sqrt(B). (The B draws are not independent subsamplings:
  they share the one random j, so amplification applies once, not B times.)

With draw="per_sample" (not in the paper) each of the B samples draws its own critic, independently: each
sanitized gradient is then a subsampled Gaussian of its own at noise multiplier sigma (sensitivity 2C, noise
2C sigma), and a step is B of them, which is the paper's count made sound; both bounds are that count.

docs/methods/gswgan.md works a number through.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .pld import check_event
from .rdp import as_orders

# Fewer orders than DEFAULT_ORDERS: the without-replacement bound costs O(order^2) per order, and the
# optimum for these mechanisms lies at small orders (2 for "sound", 4-16 for "as_published" at the paper's settings).
GSWGAN_ORDERS = np.concatenate([[1.1, 1.25, 1.5, 1.75], np.arange(2.0, 21.0), [24, 28, 32, 40, 48, 64, 96, 128, 256]])

BOUNDS = ("as_published", "sound")
PLD_BOUNDS = ("sound",)  # the bound the PLD event describes (`sound_pld_event`)
# privacy.bound names a method without a data-dependent bound may be given: both mean the sound bound here.
BOUND_ALIASES = {"data_dependent": "sound", "data_independent": "sound"}


def rdp_sampled_wor_gaussian(population: int, noise_multiplier: float, count: int, orders) -> np.ndarray:
    """RDP of `count` Gaussian mechanisms (noise std / replace-one sensitivity = noise_multiplier), each run on
    one element drawn uniformly without replacement from `population` (Wang et al. 2019, Thm 27, dp-accounting)."""
    if int(population) != population or population < 1:
        raise ValueError(f"population must be a positive integer, got {population}")
    if not noise_multiplier > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    if int(count) != count or count < 0:
        raise ValueError(f"count must be a non-negative integer, got {count}")
    one = _one_event(int(population), float(noise_multiplier), tuple(as_orders(orders).tolist()))
    return one * int(count)


@lru_cache(maxsize=32)
def _one_event(population: int, noise_multiplier: float, orders: tuple) -> np.ndarray:
    import dp_accounting

    accountant = dp_accounting.rdp.RdpAccountant(
        list(orders), neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        population, 1, dp_accounting.GaussianDpEvent(noise_multiplier)))
    return np.asarray(accountant.rdp, dtype=float).copy()


def check_batch_size(batch_size: int) -> None:
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")


# How the critics whose gradients a step sanitizes are drawn: "per_step", one for the whole batch (the paper);
# "per_sample", one for each sample, independently (docs/methods/gswgan.md)
DRAWS = ("per_step", "per_sample")
# the ledger's mechanism per draw; per_sample counts sanitized samples, each its own draw
MECHANISM = {"per_step": "gswgan_sanitizer", "per_sample": "gswgan_sanitizer_per_sample"}


def check_draw(draw: str, critic_updates: str | None = None) -> None:
    """`draw` is one of DRAWS; per_sample needs critic_updates "discarded" or "scheduled" (when given): the drawn
    critics' steps are never kept."""
    if draw not in DRAWS:
        raise ValueError(f"draw must be one of {DRAWS}, got {draw!r}")
    if draw == "per_sample" and critic_updates not in (None, "discarded", "scheduled"):
        raise ValueError("sanitizer.draw=per_sample needs critic_updates=discarded or scheduled: the drawn critics' "
                         "steps are never kept")


def rdp_gswgan_step(n_discriminators: int, batch_size: int, noise_multiplier: float, orders,
                    draw: str = "per_step") -> dict:
    """RDP of one GS-WGAN generator step under both bounds: {"as_published": ..., "sound": ...}."""
    check_batch_size(batch_size)
    check_draw(draw)
    published = rdp_sampled_wor_gaussian(n_discriminators, noise_multiplier, batch_size, orders)
    if draw == "per_sample":  # B independent draws: the paper's count is the sound one
        return {"as_published": published, "sound": published.copy()}
    return {
        "as_published": published,
        "sound": rdp_sampled_wor_gaussian(n_discriminators, noise_multiplier / np.sqrt(batch_size), 1, orders),
    }


# What becomes of the critics' updates (docs/methods/gswgan.md): "discarded", a thrown-away copy of the drawn
# critic takes its steps, so every critic stays at its warm start; "scheduled", in addition critic (step mod N_D)
# keeps the updates of its own steps, a public schedule that does not depend on the draws; "kept", the paper's
# loop, the drawn critic keeps its updates.
CRITIC_UPDATES = ("discarded", "scheduled", "kept")
# Those under which no critic's state depends on earlier draws, so each step is the subsampled mechanism
SUBSAMPLED_UPDATES = ("discarded", "scheduled")


def sound_pld_event(n_discriminators: int, batch_size: int, noise_multiplier: float) -> dict:
    """The PLD event of one step under the sound bound: dp_accounting's Poisson-subsampled Gaussian pair under
    REPLACE_ONE at rate 1 / N_D and noise multiplier sigma / sqrt(B) dominates the step when no critic's state
    depends on earlier draws (critic_updates in SUBSAMPLED_UPDATES; the derivation is in docs/methods/gswgan.md)."""
    check_batch_size(batch_size)
    return check_event({"kind": "replace_poisson_gaussian", "sample_rate": 1.0 / n_discriminators,
                        "noise_multiplier": noise_multiplier / np.sqrt(batch_size)})


def sound_pld_events(n_discriminators: int, batch_size: int, noise_multiplier: float,
                     draw: str = "per_step") -> tuple[dict, int]:
    """(event, count) of one step under the sound bound: per_step, `sound_pld_event` once; per_sample, the same
    pair for one sample (multiplier sigma), B times, one for each independently drawn critic
    (docs/methods/gswgan.md)."""
    check_batch_size(batch_size)
    check_draw(draw)
    if draw == "per_sample":
        return sound_pld_event(n_discriminators, 1, noise_multiplier), int(batch_size)
    return sound_pld_event(n_discriminators, batch_size, noise_multiplier), 1
