"""Empirical lower bounds on epsilon from one training run with canaries (Steinke, Nasr & Jagielski 2023,
"Privacy auditing with one (1) training run", Theorem 5.2).

m canaries are each included in the run with probability 1/2 by an independent coin. After the run the auditor
scores every canary and guesses "included" for its k highest scores. If the run is (eps, delta)-DP with respect
to each canary, the number of correct guesses W among the r = k guesses satisfies, for every v,

    P[W >= v] <= beta + 2 m delta * max_{i = 1..v} (P[B >= v - i] - beta) / i,   beta = P[B >= v],

with B ~ Binomial(r, e^eps / (1 + e^eps)), the accuracy of eps-DP randomized response. An observed W = v whose
bound is at most the significance level rejects the claim (eps, delta); the lower bound is the largest eps so
rejected. Several k are tried with a Bonferroni correction.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import optimize, special, stats


def one_run_p_value(m: int, guesses: int, correct: int, eps: float, delta: float) -> float:
    """P[at least `correct` of `guesses` guesses right] under an (eps, delta)-DP claim, m canaries (Thm 5.2)."""
    if not 0 <= correct <= guesses <= m:
        raise ValueError(f"need 0 <= correct <= guesses <= m, got {correct}, {guesses}, {m}")
    q = special.expit(eps)
    beta = stats.binom.sf(correct - 1, guesses, q)  # P[B >= correct]
    if delta == 0 or correct == 0:
        return float(beta)
    i = np.arange(1, correct + 1)
    alpha = np.max((stats.binom.sf(correct - i - 1, guesses, q) - beta) / i)  # P[B >= correct - i] - beta
    return float(min(1.0, beta + 2 * m * delta * alpha))


def one_run_epsilon(m: int, guesses: int, correct: int, delta: float, significance: float = 0.05) -> float:
    """The largest eps whose (eps, delta) claim `correct` of `guesses` right rejects at `significance`; 0 when
    no eps >= 0 is rejected."""
    def rejected_by(eps):  # > 0 where the claim is rejected; decreasing in eps
        return significance - one_run_p_value(m, guesses, correct, eps, delta)

    if guesses == 0 or rejected_by(0.0) <= 0:
        return 0.0
    hi = 1.0
    while rejected_by(hi) > 0:
        if hi > 1e3:
            return math.inf  # only possible with delta = 0 and every guess right
        hi *= 2
    return float(optimize.brentq(rejected_by, 0.0, hi, xtol=1e-6))


@dataclass(frozen=True)
class AuditBound:
    """The best lower bound over the guess counts tried, what it came from, and every (guesses, correct) tried."""

    epsilon: float
    guesses: int
    correct: int
    canaries: int
    included: int
    significance: float
    delta: float
    tried: tuple[tuple[int, int], ...] = ()


def audit_scores(scores: Sequence[float], included: Sequence[bool], delta: float, significance: float = 0.05,
                 guess_counts: Sequence[int] | None = None) -> AuditBound:
    """Guess "included" for the k highest scores, for each k in `guess_counts` (default: 1%, 2%, 5%, 10%, 20%
    and 50% of the canaries), and return the largest lower bound, each k tested at significance / len(counts)."""
    scores, included = np.asarray(scores, dtype=float), np.asarray(included, dtype=bool)
    m = len(scores)
    if m == 0 or len(included) != m:
        raise ValueError(f"need one inclusion flag per canary score, got {len(included)} flags, {m} scores")
    if guess_counts is None:
        guess_counts = sorted({max(1, round(f * m)) for f in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)})
    order = np.argsort(-scores, kind="stable")
    level = significance / len(guess_counts)
    tried = tuple((k, int(included[order[:k]].sum())) for k in guess_counts)
    best = (0.0, 0, 0)
    for k, correct in tried:
        eps = one_run_epsilon(m, k, correct, delta, level)
        if eps > best[0]:
            best = (eps, k, correct)
    return AuditBound(*best, m, int(included.sum()), significance, delta, tried)
