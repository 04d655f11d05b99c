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
from dpgen.aggregation.gradient_sanitizer import SanitizerParams
from dpgen.aggregation.hybrid import HybridParams, worst_case_step
from dpgen.cli.common import CONF_DIR, USER_ERRORS, console
from dpgen.cli.train import build_datamodule
from dpgen.privacy.dpsgd import noise_multiplier_of, rdp_subsampled_gaussian
from dpgen.privacy.gdp import eps_from_gdp
from dpgen.privacy.gswgan import BOUND_ALIASES as GSWGAN_ALIASES
from dpgen.privacy.gswgan import BOUNDS as GSWGAN_BOUNDS
from dpgen.privacy.gswgan import GSWGAN_ORDERS
from dpgen.privacy.laplace import rdp_laplace
from dpgen.privacy.ledger import STANDARD_BOUNDS, PrivacyLedger
from dpgen.privacy.pate import rdp_confident_gnmax_batch
from dpgen.privacy.pld import dpsgd_event
from dpgen.privacy.plan import largest_fitting, plan_laplace_pate, steps_within_budget, steps_within_budget_pld
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp

GENERATOR_STEPS = "generator steps (global_step)"

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
    return {"mechanism": "confident_gnmax", "step_unit": GENERATOR_STEPS, "teachers": teachers, "batch": batch, "queries_per_step": queries,
            "sigma1": agg.sigma1, "sigma2": agg.sigma2, "threshold": agg.threshold, "proj_dim": agg.proj_dim,
            "class_ratio_epsilon": ratio_eps,
            "best_case_steps": steps_after(prior, queries * best, p.epsilon, p.delta, p.conversion),
            "worst_case_steps": steps_after(prior, worst, p.epsilon, p.delta, p.conversion)}


def plan_dpsgd_gan(cfg: DictConfig, facts: dict) -> dict:
    """DP-GAN / DP-CGAN (methods/dpgan.py DPSGDGAN): one global_step = `critic_steps` DP-SGD discriminator steps,
    each a Poisson-subsampled Gaussian (q = batch_size / N, sigma = noise std / clip), charged before the step.
    Data-independent: best and worst case coincide."""
    module, orders, p = cfg.method.module, np.asarray(DEFAULT_ORDERS, dtype=float), cfg.privacy
    q = min(1.0, module.batch_size / facts["records"])
    sigma = noise_multiplier_of(module.noise_multiplier * module.max_grad_norm, module.max_grad_norm)
    # Xie et al. 2018 Algorithm 1: n_critic private discriminator steps per generator step (Mironov et al. 2019 RDP)
    if p.conversion == "pld":
        steps = steps_within_budget_pld([(dpsgd_event(q, sigma), module.critic_steps)], p.epsilon, p.delta)
    else:
        steps = steps_within_budget(rdp_subsampled_gaussian(q, sigma, module.critic_steps, orders), orders,
                                    p.epsilon, p.delta, p.conversion)
    unit = f"{GENERATOR_STEPS}, each {module.critic_steps} DP-SGD step{'s' * (module.critic_steps != 1)}"
    return {"mechanism": "dpsgd", "step_unit": unit,
            "batch_size": module.batch_size, "sample_rate": q, "noise_multiplier": sigma,
            "max_grad_norm": module.max_grad_norm, "dpsgd_steps_per_step": module.critic_steps,
            "dpsgd_steps": steps * module.critic_steps,
            "best_case_steps": steps, "worst_case_steps": steps}


def plan_pategan(cfg: DictConfig, facts: dict) -> dict:
    """Per step n_S student steps, each labelling n generated samples by the Laplace vote: n_S * n queries
    (PATEGAN.queries_per_step). Best case: unanimous teachers, data-dependent (PATE-GAN appendix Theorem 5);
    worst case: data-independent (Papernot et al. 2017 Theorem 2), what PATEGAN.step_cost_bound announces."""
    module, p = cfg.method.module, cfg.privacy
    # PATE-GAN Algorithm 1 lines 12-21: every generated sample the student learns is one query
    queries = module.student_steps * module.batch_size
    plan = plan_laplace_pate(module.n_teachers, module.lam, queries, p.epsilon, p.delta, conversion=p.conversion)
    return {**plan, "step_unit": GENERATOR_STEPS, "laplace_scale": 1.0 / module.lam}


def plan_gswgan(cfg: DictConfig, facts: dict) -> dict:
    """One step: one of N_D critics drawn, B sanitized gradients (privacy/gswgan.py) under both bounds:
    as_published (B subsampled events at sigma) and sound (one event at sigma / sqrt(B)). privacy.bound=as_published
    governs with the first, any other bound with the sound one (GSWGAN.step_cost_bound). Data-independent."""
    module, p = cfg.method.module, cfg.privacy
    if p.bound not in STANDARD_BOUNDS + GSWGAN_BOUNDS:
        raise ValueError(f"privacy.bound={p.bound} is not a GS-WGAN bound ({STANDARD_BOUNDS + GSWGAN_BOUNDS})")
    if facts["records"] < module.n_discriminators:
        raise ValueError(f"{module.n_discriminators} discriminators need at least as many records, "
                         f"got {facts['records']}")
    sanitizer = SanitizerParams(n_discriminators=module.n_discriminators, **module.sanitizer)
    # Chen et al. 2020 Sec. 3.2; Wang, Balle & Kasiviswanathan 2019 Thm. 27 (sampling one critic of N_D)
    steps = {bound: steps_within_budget(rdp, GSWGAN_ORDERS, p.epsilon, p.delta, p.conversion)
             for bound, rdp in sanitizer.rdp(module.batch_size, GSWGAN_ORDERS).items()}
    governing = GSWGAN_ALIASES.get(p.bound, p.bound)
    return {"mechanism": "gswgan_sanitizer", "step_unit": GENERATOR_STEPS, "n_discriminators": module.n_discriminators,
            "batch_size": module.batch_size, "noise_multiplier": sanitizer.noise_multiplier, "clip": sanitizer.clip,
            "as_published_steps": steps["as_published"], "sound_steps": steps["sound"], "governing": governing,
            "best_case_steps": steps[governing], "worst_case_steps": steps[governing]}


def gdp_rdp_steps(cost: dict, cfg: DictConfig) -> int:
    """Steps of a per-step cost {"gdp_mu": mu, "data_independent": rdp (optional)} as the ledger composes it:
    mu-GDP is (a, a mu^2 / 2)-RDP; conversion=gdp (every release GDP) composes mu's (Dong et al. 2022 Cor. 3.3)."""
    p, orders = cfg.privacy, np.asarray(DEFAULT_ORDERS, dtype=float)
    if p.conversion != "gdp":
        step = PrivacyLedger(orders).rdp("data_independent", extra=cost)
        return steps_within_budget(step, orders, p.epsilon, p.delta, p.conversion)
    if set(cost) != {"gdp_mu"}:
        raise ValueError("privacy.conversion=gdp needs every release in GDP: method.module.accounting=clt")
    return largest_fitting(lambda n: eps_from_gdp(math.sqrt(n) * cost["gdp_mu"], p.delta) <= p.epsilon)


def plan_pate_triplegan(cfg: DictConfig, facts: dict) -> dict:
    """Per step n_S student steps, each: n Confident-GNMax threshold checks ((1/sigma1)-GDP), a GNMax vote
    ((sqrt(2)/sigma2)-GDP) for each ANSWERED query, and one DP-SGD step on classifier pairs (q = n / N; RDP, or
    the central-limit mu with accounting=clt). Worst case: every query answered (PATETripleGAN.step_cost_bound);
    best case: none answered (threshold checks and DP-SGD only). Every cost is data-independent."""
    module = cfg.method.module
    if cfg.method.n_teachers != round(module.n_teachers / module.percent):
        raise ValueError(f"percent={module.percent} with {module.n_teachers} teachers needs method.n_teachers="
                         f"{round(module.n_teachers / module.percent)} partitions, got {cfg.method.n_teachers}")
    hp = HybridParams(module.sigma1, module.sigma2, module.threshold, module.noise_multiplier, module.accounting)
    q = min(1.0, module.batch_size / facts["records"])
    queries = module.student_steps * module.batch_size
    # PATE-TripleGAN Sec. 4.3 (hybrid desensitization): threshold checks on all queries, GNMax on answered ones
    worst = worst_case_step(hp, queries, module.student_steps, q, DEFAULT_ORDERS)
    dpsgd_only = worst_case_step(hp, 0, module.student_steps, q, DEFAULT_ORDERS)
    best = {**dpsgd_only, "gdp_mu": math.hypot(dpsgd_only["gdp_mu"], math.sqrt(queries) * hp.mu_threshold)}
    if cfg.privacy.conversion == "pld":
        if hp.accounting != "rdp":
            raise ValueError("privacy.conversion=pld needs method.module.accounting=rdp (a central-limit mu is not "
                             "a privacy loss distribution)")
        dpsgd = [(dpsgd_event(q, hp.noise_multiplier), module.student_steps)]
        p = cfg.privacy
        best_steps, worst_steps = (steps_within_budget_pld(dpsgd, p.epsilon, p.delta, cost["gdp_mu"])
                                   for cost in (best, worst))
    else:
        best_steps, worst_steps = gdp_rdp_steps(best, cfg), gdp_rdp_steps(worst, cfg)
    return {"mechanism": f"confident_gnmax_gdp + dpsgd_{hp.accounting}", "step_unit": GENERATOR_STEPS,
            "teachers": module.n_teachers, "batch_size": module.batch_size, "queries_per_step": queries,
            "sigma1": hp.sigma1, "sigma2": hp.sigma2, "threshold": hp.threshold, "sample_rate": q,
            "noise_multiplier": hp.noise_multiplier, "dpsgd_steps_per_step": module.student_steps,
            "accounting": hp.accounting, "best_case": "no query answered", "worst_case": "every query answered",
            "best_case_steps": best_steps, "worst_case_steps": worst_steps}


PLANNERS = {"gpate": plan_gpate, "pategan": plan_pategan, "pate_triplegan": plan_pate_triplegan,
            "dpgan": plan_dpsgd_gan, "dpcgan": plan_dpsgd_gan, "gswgan": plan_gswgan}
PLD_PLANNERS = {"dpgan", "dpcgan", "pate_triplegan"}


def plan(cfg: DictConfig) -> dict:
    if cfg.method.name not in PLANNERS:
        raise ValueError(f"no privacy planner for method={cfg.method.name}; planners exist for {sorted(PLANNERS)}")
    p = cfg.privacy
    if p.conversion == "pld" and cfg.method.name not in PLD_PLANNERS:
        raise ValueError(f"privacy.conversion=pld needs every release to be a (subsampled) Gaussian: methods "
                         f"{sorted(PLD_PLANNERS)}, not {cfg.method.name}")
    facts = data_facts(cfg)
    return {"method": cfg.method.name, "data": cfg.data.name, "epsilon": p.epsilon, "delta": p.delta,
            "conversion": p.conversion, "governing_bound": p.bound, "max_steps": cfg.method.max_steps, **facts,
            **PLANNERS[cfg.method.name](cfg, facts)}


def show(result: dict) -> None:
    table = Table(title=f"privacy plan: {result['method']} on {result['data']}", show_header=False)
    for key, value in result.items():
        if key not in ("method", "data"):
            table.add_row(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
    console.print(table)
    worst, best, unit = result["worst_case_steps"], result["best_case_steps"], result.get("step_unit", "steps")
    if best == 0:
        message = "Not one step fits the budget: training would stop before (or roll back) its first step."
    elif worst == best:
        message = f"A run stops after {best:,} {unit} (every step costs the same)."
    else:
        bound = "best" if result["governing_bound"] == "data_dependent" else "worst"
        message = (f"A run stops between {worst:,} and {best:,} {unit} "
                   f"(the {bound} case is the one privacy.bound={result['governing_bound']} can reach).")
    if 0 < result.get("max_steps", -1) < best:
        message += f" method.max_steps={result['max_steps']:,} stops it there if that comes first."
    console.print(message)


def main(argv: list[str] | None = None) -> dict:
    overrides = sys.argv[1:] if argv is None else argv
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    result = plan(cfg)
    show(result)
    return result


def cli() -> None:
    """Entry point: a user's mistake is one error line and exit status 2."""
    try:
        main()
    except (ValueError, *USER_ERRORS) as err:
        console.print(f"[bold red]error:[/] {err}")
        sys.exit(2)


if __name__ == "__main__":
    cli()
