"""PATE-GAN's private channel: the noisy teacher vote that labels generated samples for the student.

PATE-GAN Algorithm 1 lines 13-19: every generated sample is one query; each teacher votes "real" or
"fake" (eq. 3), the label is argmax(n_j + Lap(1 / lam)) (eq. 4, lam the INVERSE scale) and the query is
charged with the moments accountant of appendix Theorem 5. Noise and accounting are those of
`dpgen.privacy.pategan` (one implementation); this module only counts votes and sums the charges.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dpgen.aggregation.noise import secret_generator
from dpgen.privacy import pategan
from dpgen.privacy.cost import StepCost

FAKE, REAL = 0, 1


@dataclass
class VoteRelease:
    """What one batch of queries spent: its vote counts and its RDP per bound, summed over the queries."""

    votes: np.ndarray   # (n, 2) counts [fake, real] per query
    labels: np.ndarray  # (n,) released labels, 1 = real
    rdp: dict           # {"data_dependent": ..., "data_independent": ...} over the orders

    @property
    def count(self) -> int:
        return len(self.labels)


def secret_rng() -> np.random.Generator:
    """numpy randomness for the Laplace noise, seeded from the OS's entropy (aggregation/noise.py)."""
    return np.random.default_rng(secret_generator().initial_seed())


def teacher_votes(logits: torch.Tensor) -> np.ndarray:
    """(T, n) teacher logits -> (n, 2) counts [fake, real]: teacher t says real iff T_t(u) > 1/2 (eq. 3)."""
    real = (logits > 0).sum(0).cpu().numpy().astype(float)
    return np.stack([logits.shape[0] - real, real], axis=1)


def worst_case_rdp(lam: float, n_queries: int, orders) -> np.ndarray:
    """Data-independent RDP of n queries: each is (2 lam, 0)-DP (Papernot et al. 2017, Thm. 2)."""
    return n_queries * pategan.rdp_laplace_pate_data_independent(lam, orders)


def step_cost(lam: float, teachers: int, queries: int, orders) -> StepCost:
    """One PATE-GAN iteration: `queries` noisy votes. Worst: data-independent (Papernot et al. 2017, Thm. 2);
    best, a lower bound on any iteration: every query at the votes where it costs least, data-dependent (PATE-GAN
    appendix Thm. 5)."""
    orders = np.asarray(orders, dtype=float)
    worst = worst_case_rdp(lam, queries, orders)
    best = queries * pategan.rdp_laplace_pate_cheapest(teachers, lam, orders)
    return StepCost({"data_independent": worst}, orders, best={"data_dependent": best, "data_independent": worst})


def batch_rdp(votes: np.ndarray, lam: float, orders) -> np.ndarray:
    """Sum over queries of the data-dependent RDP (PATE-GAN appendix Thm. 5), computed once per distinct vote."""
    distinct, counts = np.unique(votes, axis=0, return_counts=True)
    return sum(c * pategan.rdp_laplace_pate(v, lam, orders) for v, c in zip(distinct, counts))


def laplace_vote_batch(logits: torch.Tensor, lam: float, orders, rng: np.random.Generator) -> VoteRelease:
    """Label n generated samples by the noisy vote of T teachers (logits (T, n)) and charge every query."""
    votes = teacher_votes(logits)
    labels = np.array([pategan.laplace_vote(v, lam, rng) for v in votes], dtype=np.int64)
    rdp = {"data_dependent": batch_rdp(votes, lam, orders),
           "data_independent": worst_case_rdp(lam, len(votes), orders)}
    return VoteRelease(votes, labels, rdp)
