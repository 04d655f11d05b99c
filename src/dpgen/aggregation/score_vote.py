"""PATE-GAN's score vote (`method.module.vote=score`, not in the paper): the teachers' mean clipped logit on each
generated sample, released with Gaussian noise, in place of the noisy majority of their binary votes.

Each teacher's score on a query is its logit clipped to [-clip, clip]. Teachers are trained on disjoint
partitions and public inputs only, so adding or removing one record changes one teacher, whose scores on n
queries move by at most 2 clip each: the mean over k teachers moves by at most 2 clip sqrt(n) / k in L2. The
release adds N(0, sigma^2) to each mean with sigma = noise x that sensitivity, so one batch of n queries is
(1 / noise)-GDP (the Gaussian mechanism, Dong et al. 2022 Thm. 2.7) whatever the votes; releases compose
adaptively as sqrt(m) / noise (their Cor. 3.3). docs/PRIVACY.md re-derives this.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from dpgen.privacy.cost import StepCost
from dpgen.privacy.ledger import GDP_EXTRA, NO_DATA_DEPENDENT_BOUND

MECHANISM = "gaussian_score"


def sensitivity(clip: float, n_teachers: int, n_queries: int) -> float:
    """L2 sensitivity of the (n_queries,) vector of mean clipped scores: one teacher changes, by <= 2 clip each."""
    return 2.0 * float(clip) * math.sqrt(n_queries) / int(n_teachers)


def noise_std(clip: float, noise: float, n_teachers: int, n_queries: int) -> float:
    """Std of the noise on each released mean score: noise x the batch's L2 sensitivity."""
    return noise * sensitivity(clip, n_teachers, n_queries)


@dataclass
class ScoreRelease:
    """One batch of released scores and its price: mu-GDP, mu = 1 / noise."""

    scores: torch.Tensor  # (n,) noisy mean clipped scores
    sigma: float          # noise std on each
    mu: float


def score_vote(logits: torch.Tensor, clip: float, noise: float, rng: np.random.Generator) -> ScoreRelease:
    """(T, n) teacher logits -> the n noisy mean scores: mean_t clip(logit_t, -clip, clip) + N(0, sigma^2); `rng`
    from the OS's entropy (pate_vote.secret_rng)."""
    if not clip > 0 or not noise > 0:
        raise ValueError(f"the score vote needs clip > 0 and noise > 0, got {clip}, {noise}")
    n_teachers, n = logits.shape
    sigma = noise_std(clip, noise, n_teachers, n)
    mean = logits.double().clamp(-clip, clip).mean(0).cpu().numpy()  # float64, not the teachers' bfloat16
    noisy = mean + rng.normal(0.0, sigma, size=n)
    return ScoreRelease(torch.as_tensor(noisy, dtype=logits.dtype, device=logits.device), sigma, 1.0 / noise)


def step_cost(noise: float, releases: int, orders) -> StepCost:
    """One PATE-GAN iteration of `releases` score batches, each (1 / noise)-GDP: sqrt(releases) / noise."""
    return StepCost({GDP_EXTRA: math.sqrt(releases) / noise}, orders, aliases=NO_DATA_DEPENDENT_BOUND)
