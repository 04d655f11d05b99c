"""Choosing one of several candidates (the downstream classifier's epochs) by their correct counts on private
records, and what that choice adds to the generator's guarantee (docs/PRIVACY.md "Choosing the classifier's epoch
on a private validation split")."""

from __future__ import annotations

import numpy as np

from .laplace import laplace_scale

MECHANISM = "report_noisy_max_laplace"


def report_noisy_max(counts, epsilon: float, rng: np.random.Generator | None = None) -> int:
    """Index of the largest count + Lap(1 / epsilon) (ties: the first). Report Noisy Max (Dwork & Roth 2014,
    Claim 3.9) is epsilon-DP for counts that each move by at most 1, all in the same direction, when one record is
    added or removed: correct counts of fixed classifiers on the private records are such counts. `rng`: the
    noise's source; by default fresh operating-system entropy, never the run's seed."""
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 1 or len(counts) == 0:
        raise ValueError(f"need a non-empty list of counts, got shape {counts.shape}")
    rng = np.random.default_rng() if rng is None else rng
    return int(np.argmax(counts + rng.laplace(0.0, laplace_scale(1.0, epsilon), size=len(counts))))


def composed_epsilon(generator_epsilon: float, selection_epsilon: float, disjoint: bool) -> float:
    """Epsilon of the generator's release together with the selections. On disjoint records, each a function of the
    record alone, one record added or removed changes one of the two inputs, so the pair costs the larger epsilon
    (parallel composition, McSherry 2009 Thm. 4); otherwise the sum (Dwork & Roth 2014, Thm. 3.16). The delta is
    the generator's either way: the selections are pure epsilon-DP."""
    if disjoint:
        return max(float(generator_epsilon), float(selection_epsilon))
    return float(generator_epsilon) + float(selection_epsilon)


def selection_report(epsilon_each: float, selections: int, generator: dict | None, disjoint: bool) -> dict:
    """The privacy.json line of the selections: their mechanism, count and epsilon, the records they read, and their
    composition with `generator` (a privacy.json of the generator's run, or None when there is none)."""
    epsilon = float(epsilon_each) * int(selections)  # pure epsilon-DP releases of the same records add up
    report = {
        "mechanism": MECHANISM,
        "epsilon_each": float(epsilon_each),
        "selections": int(selections),
        "epsilon": epsilon,
        "delta": 0.0,
        "records": "the private validation split only: the training records whose keyed hash falls in its share "
                   "(data/split.py private_val_split)",
    }
    if generator is None:
        report["release"] = {"note": "no privacy.json of the generator: its guarantee is not known here, so "
                                     "neither is the release's"}
        return report
    if generator.get("guarantee") == "none":  # e.g. method=pategan_2018_code: a reproduced code's claim only
        report["release"] = {"note": "the generator has no privacy guarantee (its privacy.json), so neither has the "
                                     "release"}
        return report
    report["release"] = {
        "epsilon": composed_epsilon(generator["epsilon"], epsilon, disjoint),
        "delta": generator["delta"],
        "composition": "parallel (max): the generator never read the validation split" if disjoint else
                       "sequential (sum): the generator's training data included the validation split",
        "generator_epsilon": generator["epsilon"],
    }
    return report
