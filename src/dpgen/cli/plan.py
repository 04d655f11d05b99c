"""`python -m dpgen.cli.plan method=gpate data=mnist privacy.epsilon=1 [experiment=...]`: how many training steps
fit the privacy budget, read from the same Hydra configs (and overrides) as train.py, without training.

The data are not loaded when their training-set size is known (KNOWN below); otherwise the datamodule is set up
to count the records. Methods register a planner in PLANNERS.
"""
from __future__ import annotations

import math
import sys
from bisect import bisect_left

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from rich.table import Table

from dpgen.aggregation.dpgradagg import DPGradAggParams, worst_case_rdp
from dpgen.cli.common import CONF_DIR, USER_ERRORS, console
from dpgen.cli.train import build_datamodule
from dpgen.privacy.laplace import rdp_laplace
from dpgen.privacy.pate import rdp_confident_gnmax_batch
from dpgen.privacy.plan import steps_within_budget
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp

CELEBA_TRAIN, CELEBA_VALID = 162_770, 19_867  # official list_eval_partition.txt: partitions 0 and 1
CREDIT_CLASSES = (284_315, 492)  # creditcard.csv: normal, fraud


def known_train_size(data: DictConfig) -> int | None:
    """Training records of the built-in data sets from their published sizes and our splits, else None."""
    if data.name in ("mnist", "fashion_mnist"):
        return 60_000
    if data.name in ("celeba_gender_s", "celeba_gender_l"):
        return CELEBA_TRAIN + (CELEBA_VALID if data.include_valid_in_train else 0)
    if data.name == "kaggle_credit":  # dpgen.data.split.stratified_split: round(n_c * test_fraction) to test
        return sum(n - round(n * data.test_fraction) for n in CREDIT_CLASSES)
    return None


def data_facts(cfg: DictConfig) -> dict:
    """Record shape, training records, smallest teacher partition (and where the count came from)."""
    dm = build_datamodule(cfg)  # constructing reads no data
    n = known_train_size(cfg.data)
    if n is None:
        dm.prepare_data()
        dm.setup("fit")
        n, smallest, source = len(dm.train_data), min(len(p) for p in dm.partitions), "loaded"
    else:
        smallest, source = n // cfg.method.n_teachers, "known size"  # partition_indices: sizes differ by <= 1
    return {"shape": tuple(dm.shape), "records": n, "smallest_partition": smallest, "records_source": source}


def steps_after(prior: np.ndarray, step: np.ndarray, epsilon: float, delta: float, conversion: str) -> int:
    """Largest n with eps(prior + n * step) <= epsilon: what PrivacyBudget allows after the prior releases."""
    orders = np.asarray(DEFAULT_ORDERS, dtype=float)
    most = steps_within_budget(step, orders, epsilon, delta, conversion)  # prior >= 0 can only lower it
    over = bisect_left(range(most + 1), True,
                       key=lambda n: eps_from_rdp(prior + n * step, orders, delta, conversion)[0] > epsilon)
    return over - 1


def plan_gpate(cfg: DictConfig, facts: dict) -> dict:
    """Per step b * k Confident-GNMax queries (b = min(batch, smallest partition), the teachers' batch sampler).
    Best case: every query answered with unanimous teachers, data-dependent RDP (the bound the paper reports).
    Worst case: every query answered, data-independent RDP (exactly what GPATE.step_cost_bound announces).
    The Laplace class ratio (class_ratio_epsilon), released before training, is paid first."""
    module, orders = cfg.method.module, np.asarray(DEFAULT_ORDERS, dtype=float)
    agg = DPGradAggParams(**module.aggregator)
    teachers = cfg.method.n_teachers
    batch = min(cfg.method.batch_size, facts["smallest_partition"])
    queries = batch * agg.queries_per_sample(math.prod(facts["shape"]))
    unanimous = np.zeros((1, agg.bins))
    unanimous[0, 0] = teachers
    best, _ = rdp_confident_gnmax_batch(unanimous, agg.threshold * teachers, agg.sigma1, agg.sigma2, orders, [True])
    worst = worst_case_rdp(agg, queries, orders)
    ratio_eps = module.get("class_ratio_epsilon")
    prior = np.zeros_like(orders) if ratio_eps is None else rdp_laplace(ratio_eps, orders)
    p = cfg.privacy
    return {"mechanism": "confident_gnmax", "teachers": teachers, "batch": batch, "queries_per_step": queries,
            "sigma1": agg.sigma1, "sigma2": agg.sigma2, "threshold": agg.threshold, "proj_dim": agg.proj_dim,
            "class_ratio_epsilon": ratio_eps,
            "best_case_steps": steps_after(prior, queries * best, p.epsilon, p.delta, p.conversion),
            "worst_case_steps": steps_after(prior, worst, p.epsilon, p.delta, p.conversion)}


PLANNERS = {"gpate": plan_gpate}


def plan(cfg: DictConfig) -> dict:
    if cfg.method.name not in PLANNERS:
        raise ValueError(f"no privacy planner for method={cfg.method.name}; planners exist for {sorted(PLANNERS)}")
    facts = data_facts(cfg)
    p = cfg.privacy
    return {"method": cfg.method.name, "data": cfg.data.name, "epsilon": p.epsilon, "delta": p.delta,
            "conversion": p.conversion, "governing_bound": p.bound, **facts,
            **PLANNERS[cfg.method.name](cfg, facts)}


def show(result: dict) -> None:
    table = Table(title=f"privacy plan: {result['method']} on {result['data']}", show_header=False)
    for key, value in result.items():
        if key not in ("method", "data"):
            table.add_row(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
    console.print(table)
    bound = "best" if result["governing_bound"] == "data_dependent" else "worst"
    console.print(f"A run stops between {result['worst_case_steps']:,} and {result['best_case_steps']:,} steps "
                  f"(the {bound} case is the one privacy.bound={result['governing_bound']} can reach).")


def main(argv: list[str] | None = None) -> dict:
    overrides = sys.argv[1:] if argv is None else argv
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    result = plan(cfg)
    show(result)
    return result


if __name__ == "__main__":
    try:
        main()
    except (ValueError, *USER_ERRORS) as err:
        console.print(f"[bold red]error:[/] {err}")
        sys.exit(2)
