"""Choosing one of several candidates (the downstream classifier's epochs) by their correct counts on private
records, and what that choice adds to the generator's guarantee (docs/methods/private_val.md)."""

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


NOT_DP = ("data_dependent", "as_published")  # bounds that are not themselves DP guarantees (privacy/ledger.py)


class SelectionBudgetError(ValueError):
    """A private validation selection would take the selections past their stated budget."""


def dp_epsilon(generator: dict) -> tuple[float, str]:
    """(epsilon, bound) of the generator's differential-privacy guarantee, from its privacy.json: the governing
    bound's epsilon when that bound is a DP guarantee; otherwise (a data-dependent bound governed, as by default for
    G-PATE and PATE-GAN, or GS-WGAN's as-published count) the DP bound's total at the run's conversion (the
    smallest over the sound conversions reported where that conversion was not computed for it)."""
    bound = generator.get("governing_bound")
    if bound not in NOT_DP:
        return float(generator["epsilon"]), str(bound)
    sound = {name: total for name, total in generator.get("total", {}).items() if name not in NOT_DP}
    if not sound:
        raise ValueError(f"the generator's privacy.json reports no DP bound beside its {bound} epsilon")
    name, total = next(iter(sorted(sound.items())))
    entry = total.get(generator.get("conversion")) or min(total.values(), key=lambda e: e["epsilon"])
    return float(entry["epsilon"]), name


def composed_epsilon(generator_epsilon: float, charges: list[dict]) -> tuple[float, str]:
    """Epsilon of the generator's release together with the selections `charges` (each {"epsilon", "disjoint"}),
    and how it composes. When every selection read records disjoint from the generator's (a function of each record
    alone decides the side), one record added or removed changes the generator's input or the selections' only,
    so the release costs max(generator, sum of the selections): the selections on one split add up (Dwork & Roth
    2014, Thm. 3.16) and compose in parallel with the generator (McSherry 2009, Thm. 4). Otherwise everything adds
    up. The delta is the generator's either way: the selections are pure epsilon-DP."""
    selections = sum(float(c["epsilon"]) for c in charges)
    if all(c["disjoint"] for c in charges):
        return max(float(generator_epsilon), selections), "parallel (max): the generator never read the validation split"
    return float(generator_epsilon) + selections, ("sequential (sum): a selection read a split that the generator's "
                                                   "privacy.json does not name as held out from its training data")


def charge(epsilon: float, disjoint: bool, split: dict | None, by: str, earlier: list[dict],
           budget: float | None) -> dict:
    """One selection's charge, made before the selection is: SelectionBudgetError when it and the `earlier`
    charges on this release would exceed `budget` (None: no stated budget)."""
    spent = sum(float(c["epsilon"]) for c in earlier)
    if budget is not None and spent + float(epsilon) > float(budget) * (1 + 1e-12):
        raise SelectionBudgetError(
            f"a private validation selection at epsilon {epsilon:g} would take this release's selections to "
            f"{spent + epsilon:g}, past their budget eval.private_val.budget={budget:g} ({len(earlier)} made "
            "already): choose the epoch on the synthetic hold-out (eval.selection=synthetic), or state a larger "
            "budget")
    return {"epsilon": float(epsilon), "disjoint": bool(disjoint), "split": split, "by": by}


def earlier_charges(generator: dict | None) -> list[dict]:
    """The charges a generator's privacy.json records (its `downstream_selection`, made during training on the run's
    own held-out split); a record of an older dpgen (a count and an epsilon each) is expanded to its charges."""
    line = (generator or {}).get("downstream_selection")
    if not line:
        return []
    if "charges" in line:
        return [dict(c) for c in line["charges"]]
    split = (generator.get("records") or {}).get("private_val")
    return [charge(line["epsilon_each"], True, split, "train.py", [], None) for _ in range(int(line["selections"]))]


def selection_report(charges: list[dict], generator: dict | None) -> dict:
    """The privacy.json line of the selections `charges` (every one made on this release, in order: see
    `charge`), with their composition with `generator` (a privacy.json of the generator's run, or None)."""
    report = {
        "mechanism": MECHANISM,
        "selections": len(charges),
        "epsilon": sum(float(c["epsilon"]) for c in charges),  # pure epsilon-DP releases of the same records add up
        "delta": 0.0,
        "records": "the private validation split only: the training records whose keyed hash falls in its share "
                   "(data/split.py private_val_split)",
        "charges": charges,
    }
    if generator is None:
        report["release"] = {"note": "no privacy.json of the generator: its guarantee is not known here, so "
                                     "neither is the release's"}
        return report
    if generator.get("guarantee") == "none" or not generator.get("private", True):  # e.g. pategan_2018_code
        report["release"] = {"note": "the generator has no privacy guarantee (its privacy.json), so neither has the "
                                     "release"}
        return report
    epsilon, bound = dp_epsilon(generator)
    total, composition = composed_epsilon(epsilon, charges)
    report["release"] = {"epsilon": total, "delta": generator["delta"], "bound": bound, "composition": composition,
                         "generator_epsilon": epsilon}
    if generator.get("governing_bound") in NOT_DP:  # the number the run was stopped by, beside, with its caveat
        report["release"]["governing_bound"] = {
            "bound": generator["governing_bound"], "epsilon": composed_epsilon(generator["epsilon"], charges)[0],
            "note": "not a differential-privacy guarantee: the generator's epsilon under this bound depends on the "
                    "private data (its privacy.json note)"}
    return report
