"""PATE-TripleGAN's hybrid gradient desensitization (PATE-TripleGAN sections 4.2-4.4), the accounting side.

Generator-made pairs: the student discriminator learns from Confident-GNMax votes of the teachers (threshold
check with N(0, sigma1^2), then GNMax with N(0, sigma2^2); Papernot et al. 2018, Algorithm 1 of the paper).
Classifier-made pairs: the student's gradient is clipped and noised by DP-SGD (Opacus; the method runs it).

Costs in Gaussian DP (Dong, Roth & Su 2022): a threshold check has sensitivity 1 (one record changes one
teacher, hence the top count by at most 1): (1/sigma1)-GDP; an answered GNMax has L2 sensitivity sqrt(2)
(one vote moves between the two counts, the paper's Proposition 1): (sqrt(2)/sigma2)-GDP. The DP-SGD step is
accounted either with its RDP (Opacus, a bound) or with the paper's Bu et al. 2020 central-limit mu
(`clt`, an approximation, marked asymptotic in the ledger).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from dpgen.aggregation.dpgradagg import DPGradAggParams, confident_gnmax
from dpgen.aggregation.pate_vote import teacher_votes
from dpgen.privacy.cost import StepCost
from dpgen.privacy.dpsgd import rdp_subsampled_gaussian
from dpgen.privacy.gdp import mu_gaussian, mu_poisson_clt
from dpgen.privacy.ledger import NO_DATA_DEPENDENT_BOUND
from dpgen.privacy.pld import dpsgd_event

THRESHOLD, VOTE, DPSGD = "gnmax_threshold", "gnmax_vote", "dpsgd_classifier_pairs"
ACCOUNTING = ("rdp", "clt")
# Which GNMax releases are charged: "answered" (the paper: a query that fails the threshold check releases no label,
# so the number charged is an outcome of the checks, covered by GDP's fully adaptive composition) or "every" (each
# query charged its GNMax as if answered: a fixed sequence of releases, sound under any conversion, PLD included)
VOTE_CHARGES = ("answered", "every")


@dataclass(frozen=True)
class HybridParams:
    """sigma1 / sigma2: threshold and GNMax noise (vote counts); threshold: a fraction of the teachers;
    noise_multiplier: DP-SGD noise std over the clip norm; accounting of the DP-SGD part: "rdp" or "clt";
    vote_charge: which GNMax releases are charged (VOTE_CHARGES)."""

    sigma1: float = 300.0
    sigma2: float = 300.0
    threshold: float = 0.5
    noise_multiplier: float = 0.4
    accounting: str = "rdp"
    vote_charge: str = "answered"

    def __post_init__(self):
        DPGradAggParams(sigma1=self.sigma1, sigma2=self.sigma2, threshold=self.threshold)  # same checks
        if not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier must be > 0, got {self.noise_multiplier}")
        if self.accounting not in ACCOUNTING:
            raise ValueError(f"accounting must be one of {ACCOUNTING}, got {self.accounting!r}")
        if self.vote_charge not in VOTE_CHARGES:
            raise ValueError(f"vote_charge must be one of {VOTE_CHARGES}, got {self.vote_charge!r}")

    def votes_charged(self, answered: int, queries: int) -> int:
        """GNMax releases charged for `queries` checks of which `answered` passed (`vote_charge`)."""
        return queries if self.vote_charge == "every" else answered

    @property
    def mu_threshold(self) -> float:
        return mu_gaussian(1.0, self.sigma1)

    @property
    def mu_vote(self) -> float:
        return mu_gaussian(math.sqrt(2.0), self.sigma2)


@dataclass
class VoteRelease:
    votes: np.ndarray     # (n, 2) counts [fake, real]
    answered: np.ndarray  # (n,) passed the noisy threshold
    labels: np.ndarray    # (n,) GNMax label, 1 = real (meaningful where answered)


def noisy_vote(logits: torch.Tensor, p: HybridParams, generator: torch.Generator) -> VoteRelease:
    """Confident-GNMax on the teachers' real / fake votes (logits (T, n)) for n generator-made pairs."""
    votes = teacher_votes(logits)
    agg = DPGradAggParams(sigma1=p.sigma1, sigma2=p.sigma2, threshold=p.threshold)
    answered, labels = confident_gnmax(torch.as_tensor(votes, device=generator.device), logits.shape[0], agg,
                                       generator)
    return VoteRelease(votes, answered.cpu().numpy(), labels.cpu().numpy())


@functools.lru_cache(maxsize=8)
def _dpsgd_rdp(sample_rate: float, noise_multiplier: float, orders: tuple) -> np.ndarray:
    rdp = rdp_subsampled_gaussian(sample_rate, noise_multiplier, 1, orders)
    rdp.setflags(write=False)  # shared by every step that asks
    return rdp


def dpsgd_cost(p: HybridParams, sample_rate: float, orders):
    """One DP-SGD step: ("rdp", RDP over orders) or ("gdp", the paper's central-limit mu)."""
    if p.accounting == "clt":
        return "gdp", mu_poisson_clt(sample_rate, p.noise_multiplier, 1)
    return "rdp", _dpsgd_rdp(float(sample_rate), float(p.noise_multiplier), tuple(np.asarray(orders, dtype=float)))


def record(ledger, p: HybridParams, release: VoteRelease, sample_rate: float) -> None:
    """Charge one student step: every threshold check, every answered GNMax (or every query's, `vote_charge`), one
    DP-SGD step."""
    ledger.record_gdp(THRESHOLD, p.mu_threshold, count=len(release.answered), params={"sigma1": p.sigma1})
    charged = p.votes_charged(int(release.answered.sum()), len(release.answered))
    ledger.record_gdp(VOTE, p.mu_vote, count=charged, params={"sigma2": p.sigma2})
    channel, cost = dpsgd_cost(p, sample_rate, ledger.orders)
    params = {"sample_rate": sample_rate, "noise_multiplier": p.noise_multiplier}
    if channel == "gdp":
        ledger.record_gdp(DPSGD, cost, count=1, params=params, asymptotic=True)
    else:
        ledger.record(DPSGD, {"data_independent": cost}, count=1, params=params,
                      event=dpsgd_event(sample_rate, p.noise_multiplier))


def step_cost(p: HybridParams, queries: int, student_steps: int, sample_rate: float, orders) -> StepCost:
    """One PATE-TripleGAN iteration: `queries` threshold checks, a GNMax vote for each answered one, and
    `student_steps` DP-SGD steps (section 4.3). Worst: every query answered; best: none (with vote_charge="every",
    every query is charged as answered either way). All data-independent."""
    orders = np.asarray(orders, dtype=float)
    channel, cost = dpsgd_cost(p, sample_rate, orders)

    def answering(answered: int) -> dict:
        mu_sq = queries * p.mu_threshold**2 + answered * p.mu_vote**2
        if channel == "gdp":
            return {"gdp_mu": math.sqrt(mu_sq + student_steps * cost**2)}
        return {"gdp_mu": math.sqrt(mu_sq), "data_independent": student_steps * cost}

    events = ((dpsgd_event(sample_rate, p.noise_multiplier), student_steps),) if channel == "rdp" else ()
    return StepCost(answering(queries), orders, best=answering(p.votes_charged(0, queries)),
                    aliases=NO_DATA_DEPENDENT_BOUND, pld_events=events)
