"""What train.py prints when a run ends: what the synthetic data is worth, the privacy it cost and what kind of
promise that is, how long it took, and where its files are (metrics.json and privacy.json hold the rest)."""
from __future__ import annotations

import json
from pathlib import Path

from dpgen.cli.common import console
from dpgen.privacy.selection import NOT_DP, dp_epsilon

# The two ways a holder of the synthetic data may choose the downstream classifier's epoch (docs/EVALUATION.md)
SELECTIONS = {"private_val": "accuracy, DP selection (private validation split)",
              "synthetic": "accuracy, synthetic hold-out selection"}


def duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def utility_rows(downstream: dict) -> list[tuple[str, str]]:
    """Images: the accuracy under each selection of SELECTIONS (the DP one only with eval.selection=private_val,
    which holds the split out); tables: the mean AUROC / AUPRC of the downstream models."""
    if not downstream:
        return [("downstream utility", "not evaluated (eval=none); evaluate.py measures it")]
    if "average" in downstream:
        average = downstream["average"]
        return [("AUROC / AUPRC (mean of the models)", f"{average['auroc']:.3f} / {average['auprc']:.3f}")]
    missing = {"private_val": "not measured (eval.selection=private_val holds the split out)"}
    return [(label, f"{downstream[key]['accuracy']:.1%} (classifier epoch {downstream[key]['epoch']})"
             if downstream.get(key) else missing.get(key, "-")) for key, label in SELECTIONS.items()]


def guarantee(privacy: dict, private: bool) -> tuple[str, str]:
    """(epsilon and delta spent, kind of guarantee) from the run's privacy.json: "DP"; "data-dependent" (the bound
    that stopped training is computed from the private data, so it is not itself a DP guarantee: the DP bound is
    given beside it); or "none" (a method without a guarantee, or privacy off)."""
    if privacy.get("guarantee") == "none" or not privacy.get("private", True):
        claimed = privacy.get("claimed_epsilon")
        return ("none" if claimed is None else f"none (the code claims eps {claimed:g})",
                f"none: {privacy.get('note', 'no differential privacy guarantee')}")
    if not private:
        return "none", "none: privacy off (method.private=false), a noise-free control"
    release = (privacy.get("downstream_selection") or {}).get("release") or {}
    together = " (the generator and the DP selection together)" if "epsilon" in release else ""
    dp = release.get("epsilon", dp_epsilon(privacy)[0])
    delta = privacy["delta"]
    if privacy.get("governing_bound") in NOT_DP:
        stated = (release.get("governing_bound") or {}).get("epsilon", privacy["epsilon"])
        return (f"eps {stated:.3g} at delta {delta:g} by the {privacy['governing_bound']} bound, {dp:.3g} by the DP "
                f"bound{together}", "data-dependent: the bound that stopped training is computed from the private "
                                    "data, not itself a DP guarantee")
    return f"eps {dp:.3g} at delta {delta:g}{together}", "DP"


def summary_rows(out: Path, results: dict, grid: Path | None, private: bool) -> list[tuple[str, str]]:
    """The summary of a finished run (`results`: its metrics.json) as (label, value) rows."""
    privacy_file = out / "privacy.json"
    privacy = json.loads(privacy_file.read_text()) if privacy_file.is_file() else results["privacy"]
    spent, kind = guarantee(privacy, private)
    wall = f"{duration(results['wall_time_s'])}: {results['steps']} steps and the evaluation"
    clock = results.get("run_clock")
    if clock:
        wall += f" (training {duration(clock['train_s_this_process'])})"
    return [*utility_rows(results.get("downstream") or {}), ("privacy spent", spent), ("guarantee", kind),
            ("wall time", wall),
            ("run folder", str(out)), ("samples", str(grid) if grid else "none"),
            ("generator", str(out / "generator.pt"))]


def print_summary(out: Path, results: dict, grid: Path | None, private: bool) -> None:
    """The rows of `summary_rows` under the run's title, one per line and never wrapped (paths stay whole)."""
    rows = summary_rows(out, results, grid, private)
    width = max(len(label) for label, _ in rows)
    console.print(f"{results['method']} on {results['data']}:", style="bold", markup=False)
    for label, value in rows:
        console.print(f"  {label + ':':<{width + 1}}  {value}", soft_wrap=True, markup=False, highlight=False)
