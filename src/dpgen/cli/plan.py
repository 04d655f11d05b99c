"""`python -m dpgen.cli.plan method=gpate data=mnist privacy.epsilon=1 [experiment=...]`: how many training steps
fit the privacy budget, read from the same Hydra configs (and overrides) as train.py, without training.

The data are not loaded when their training-set size is known (KNOWN below); otherwise the datamodule is set up
to count the records. Each method's planner maps its configuration to the StepCost the method itself builds
(privacy/cost.py), registered in PLANNERS.
"""
from __future__ import annotations

import math
import sys

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from rich.table import Table

from dpgen.aggregation import dpgradagg, hybrid, mean_embedding, pate_vote
from dpgen.aggregation.dpgradagg import DPGradAggParams
from dpgen.aggregation.gradient_sanitizer import SanitizerParams
from dpgen.aggregation.hybrid import HybridParams
from dpgen.cli.common import CONF_DIR, USER_ERRORS, check_config, console, fail, private_val_share
from dpgen.cli.train import build_datamodule
from dpgen.methods.dpmerf import check_guide
from dpgen.privacy.cost import StepCost, dpsgd_step
from dpgen.privacy.dpsgd import noise_multiplier_of
from dpgen.privacy.gaussian import gaussian_sigma
from dpgen.privacy.gswgan import BOUND_ALIASES as GSWGAN_ALIASES
from dpgen.privacy.gswgan import BOUNDS as GSWGAN_BOUNDS
from dpgen.privacy.gswgan import PLD_BOUNDS as GSWGAN_PLD_BOUNDS
from dpgen.privacy.gswgan import MECHANISM as GSWGAN_MECHANISM
from dpgen.privacy.gswgan import SUBSAMPLED_UPDATES, check_draw
from dpgen.privacy.ledger import STANDARD_BOUNDS, conversion_for
from dpgen.privacy import two_stage
from dpgen.privacy.plan import MAX_STEPS
from dpgen.privacy.rdp import DEFAULT_ORDERS

USAGE = """usage: python -m dpgen.cli.plan [override ...]

How many training steps fit the privacy budget, read from the same configs and overrides as train.py, without
training. For example:
  python -m dpgen.cli.plan experiment=gpate/mnist_eps1
  python -m dpgen.cli.plan method=dpcgan_reference data=fashion_mnist privacy.epsilon=1 method.module.noise_multiplier=4
It prints the cost of one step and the number of steps the budget buys in the best and the worst case."""
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
    """Record shape and training records (and where the count came from)."""
    dm = build_datamodule(cfg)  # constructing reads no data
    # a private validation split holds out a record-dependent share: only counting the records gives its N
    n, source = (None, None) if private_val_share(cfg) else (known_train_size(cfg.data), "known size")
    if n is None:
        dm.prepare_data()
        dm.setup("fit")
        n, source = len(dm.train_data), "loaded"
    return {"shape": tuple(dm.shape), "records": n, "records_source": source}


def plan_gpate(cfg: DictConfig, facts: dict) -> tuple[StepCost, dict]:
    """Per step b * k Confident-GNMax queries, b = the teachers' batch size (fixed: data/partition.py,
    GPATE.queries_per_step); the Laplace class ratio, when released, is paid first."""
    module = cfg.method.module
    agg = DPGradAggParams(**module.aggregator)
    batch = cfg.method.batch_size
    queries = batch * agg.queries_per_sample(math.prod(facts["shape"]))
    cost = dpgradagg.step_cost(agg, cfg.method.n_teachers, queries, DEFAULT_ORDERS, module.get("class_ratio_epsilon"))
    return cost, {"mechanism": "confident_gnmax", "teachers": cfg.method.n_teachers, "batch": batch,
                  "queries_per_step": queries, "sigma1": agg.sigma1, "sigma2": agg.sigma2, "threshold": agg.threshold,
                  "proj_dim": agg.proj_dim, "class_ratio_epsilon": module.get("class_ratio_epsilon"),
                  "best_case": "no query answered (threshold checks only), or unanimous teachers (data-dependent)",
                  "worst_case": "every query answered (data-independent)"}


def plan_dpsgd_gan(cfg: DictConfig, facts: dict) -> tuple[StepCost, dict]:
    """DP-GAN / DP-CGAN: one step = `critic_steps` DP-SGD discriminator steps (Xie et al. 2018 Algorithm 1), each a
    Poisson-subsampled Gaussian (q = batch_size / N, sigma = noise std / clip, DPSGDGAN.accounted_noise_multiplier)."""
    module = cfg.method.module
    q = min(1.0, module.batch_size / facts["records"])
    sigma = noise_multiplier_of(module.noise_multiplier * module.max_grad_norm, module.max_grad_norm)
    unit = f"{GENERATOR_STEPS}, each {module.critic_steps} DP-SGD step{'s' * (module.critic_steps != 1)}"
    return dpsgd_step(q, sigma, module.critic_steps, DEFAULT_ORDERS), {
        "mechanism": "dpsgd", "step_unit": unit, "batch_size": module.batch_size, "sample_rate": q,
        "noise_multiplier": sigma, "max_grad_norm": module.max_grad_norm, "dpsgd_steps_per_step": module.critic_steps}


def plan_pategan(cfg: DictConfig, facts: dict) -> tuple[StepCost, dict]:
    """Per step n_S student steps, each labelling n generated samples by the Laplace vote (PATE-GAN Algorithm 1
    lines 12-21): n_S * n queries (PATEGAN.queries_per_step)."""
    module = cfg.method.module
    queries = module.student_steps * module.batch_size
    return pate_vote.step_cost(module.lam, module.n_teachers, queries, DEFAULT_ORDERS), {
        "mechanism": "laplace_pate", "teachers": module.n_teachers, "lam": module.lam, "laplace_scale": 1.0 / module.lam,
        "queries_per_step": queries, "best_case": "unanimous teachers (data-dependent)",
        "worst_case": "data-independent"}


def plan_gswgan(cfg: DictConfig, facts: dict) -> tuple[StepCost, dict]:
    """One step: one of N_D critics drawn (or one per sample: sanitizer.draw), B sanitized gradients (Chen et al.
    2020 Sec. 3.2), priced under both bounds (privacy/gswgan.py); privacy.bound=as_published governs with the
    paper's, any other with the sound one.
    Under privacy.conversion=pld the paper's bound, which has no PLD, is priced by the classical conversion."""
    module, p = cfg.method.module, cfg.privacy
    if p.bound not in STANDARD_BOUNDS + GSWGAN_BOUNDS:
        raise ValueError(f"privacy.bound={p.bound} is not a GS-WGAN bound ({STANDARD_BOUNDS + GSWGAN_BOUNDS})")
    subsampled = module.critic_updates in SUBSAMPLED_UPDATES
    if p.conversion == "pld" and not subsampled:
        raise ValueError("privacy.conversion=pld needs method.module.critic_updates=discarded or scheduled (the PLD holds where "
                         "each step is the subsampled mechanism, docs/methods/gswgan.md); with kept use "
                         "privacy.conversion=classical")
    sanitizer = SanitizerParams(n_discriminators=module.n_discriminators, **module.sanitizer)
    check_draw(sanitizer.draw, module.critic_updates)
    cost = sanitizer.step_cost(module.batch_size, pld=subsampled)
    conversions = {bound: conversion_for(p.conversion, bound in GSWGAN_PLD_BOUNDS) for bound in GSWGAN_BOUNDS}
    return cost, {"mechanism": GSWGAN_MECHANISM[sanitizer.draw], "n_discriminators": module.n_discriminators,
                  "batch_size": module.batch_size, "noise_multiplier": sanitizer.noise_multiplier, "clip": sanitizer.clip,
                  "critic_updates": module.critic_updates, "draw": sanitizer.draw,
                  **{f"{bound}_steps": cost.steps(p.epsilon, p.delta, bound, conversions[bound]) for bound in GSWGAN_BOUNDS},
                  **{f"{bound}_conversion": conversions[bound] for bound in GSWGAN_BOUNDS},
                  "governing": GSWGAN_ALIASES.get(p.bound, p.bound)}


def plan_pate_triplegan(cfg: DictConfig, facts: dict) -> tuple[StepCost, dict]:
    """Per step n_S student steps, each: n threshold checks, a GNMax vote for each answered query, and one DP-SGD
    step on classifier pairs (q = the DP-SGD batch / N) (PATE-TripleGAN Sec. 4.3, PATETripleGAN.step_cost)."""
    module = cfg.method.module
    if cfg.method.n_teachers != round(module.n_teachers / module.percent):
        raise ValueError(f"percent={module.percent} with {module.n_teachers} teachers needs method.n_teachers="
                         f"{round(module.n_teachers / module.percent)} partitions, got {cfg.method.n_teachers}")
    if cfg.privacy.conversion == "pld" and module.vote_charge == "answered":
        raise ValueError("privacy.conversion=pld needs method.module.vote_charge=every: with answered, the number of "
                         "charged votes is an outcome of the checks, and no proof covers its PLD composition")
    if cfg.privacy.conversion == "pld" and module.accounting != "rdp":
        raise ValueError("privacy.conversion=pld needs method.module.accounting=rdp (a central-limit mu is not "
                         "a privacy loss distribution)")
    hp = HybridParams(module.sigma1, module.sigma2, module.threshold, module.noise_multiplier, module.accounting,
                      module.vote_charge)
    dpsgd_batch = module.batch_size if module.get("dpsgd_batch_size") is None else module.dpsgd_batch_size
    q = min(1.0, dpsgd_batch / facts["records"])
    queries = module.student_steps * module.batch_size
    return hybrid.step_cost(hp, queries, module.student_steps, q, DEFAULT_ORDERS), {
        "mechanism": f"confident_gnmax_gdp + dpsgd_{hp.accounting}", "teachers": module.n_teachers,
        "batch_size": module.batch_size, "dpsgd_batch_size": dpsgd_batch, "queries_per_step": queries,
        "sigma1": hp.sigma1, "sigma2": hp.sigma2, "threshold": hp.threshold, "sample_rate": q,
        "noise_multiplier": hp.noise_multiplier, "dpsgd_steps_per_step": module.student_steps,
        "accounting": hp.accounting,
        "best_case": "every query charged" if hp.vote_charge == "every" else "no query answered",
        "worst_case": "every query answered"}


def plan_dpmerf(cfg: DictConfig, facts: dict) -> tuple[StepCost, dict]:
    """One Gaussian release, its sigma calibrated to the budget as the method calibrates it; steps are free."""
    module, p = cfg.method.module, cfg.privacy
    a = module.count_feature
    if module.get("guide") is not None:  # the release and the guide's DP-SGD, as DPMERF.setup plans them
        spec = check_guide(OmegaConf.to_container(module.guide), p.conversion)
        planned = two_stage.plan(p.epsilon, p.delta, mean_embedding.sensitivity(a), spec["share"], spec["batch_size"],
                                 spec["epochs"], facts["records"], p.conversion, DEFAULT_ORDERS)
        return two_stage.step_cost(planned, DEFAULT_ORDERS), {
            "mechanism": f"{mean_embedding.MECHANISM}, then {two_stage.DPSGD}", "sensitivity":
            mean_embedding.sensitivity(a), "sigma": planned["sigma"], "guide_sample_rate": planned["sample_rate"],
            "guide_steps": planned["steps"], "guide_noise_multiplier": planned["noise_multiplier"],
            "steps": "free: training reads only the two releases (post-processing)"}
    sigma = gaussian_sigma(p.epsilon, p.delta, mean_embedding.sensitivity(a), p.conversion)
    return mean_embedding.step_cost(a, sigma, DEFAULT_ORDERS), {
        "mechanism": mean_embedding.MECHANISM, "sensitivity": mean_embedding.sensitivity(a), "sigma": sigma,
        "features": module.n_features if module.get("features") is None else "the blocks of method.module.features",
        "steps": "free: training reads only the release (post-processing)"}


PLANNERS = {"dpmerf": plan_dpmerf, "gpate": plan_gpate, "pategan": plan_pategan, "pate_triplegan": plan_pate_triplegan,
            "dpgan": plan_dpsgd_gan, "dpcgan": plan_dpsgd_gan, "gswgan": plan_gswgan}


def plan(cfg: DictConfig) -> dict:
    """Steps a run can take: the method's own StepCost (privacy/cost.py) for this configuration, priced as
    PrivacyBudget prices it, in its worst case and its best case."""
    if cfg.method.name not in PLANNERS:
        raise ValueError(f"no privacy planner for method={cfg.method.name}; planners exist for {sorted(PLANNERS)}")
    p = cfg.privacy
    facts = data_facts(cfg)
    cost, params = PLANNERS[cfg.method.name](cfg, facts)
    if p.conversion == "pld" and not cost.pld_events:
        raise ValueError(f"privacy.conversion=pld needs every release to be a (subsampled) Gaussian: methods "
                         f"dpgan, dpcgan, pate_triplegan, gswgan, not {cfg.method.name}")
    steps = {case: cost.steps(p.epsilon, p.delta, p.bound, p.conversion, case) for case in ("best", "worst")}
    return {"method": cfg.method.name, "data": cfg.data.name, "epsilon": p.epsilon, "delta": p.delta,
            "conversion": p.conversion, "governing_bound": p.bound, "max_steps": cfg.method.max_steps, **facts,
            "step_unit": GENERATOR_STEPS, **params,
            "best_case_steps": steps["best"], "worst_case_steps": steps["worst"]}


def show(result: dict) -> None:
    table = Table(title=f"privacy plan: {result['method']} on {result['data']}", show_header=False)
    for key, value in result.items():
        if key not in ("method", "data"):
            table.add_row(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
    console.print(table)
    worst, best, unit = result["worst_case_steps"], result["best_case_steps"], result.get("step_unit", "steps")
    if best == 0:
        message = "Not one step fits the budget: train.py refuses it before training (one error line, exit status 2)."
    elif worst == MAX_STEPS:
        message = (f"The budget pays for the release alone; every step after it is free: the run stops at "
                   f"method.max_steps={result['max_steps']:,}.")
    elif worst == best:
        message = f"A run stops after {best:,} {unit} (every step costs the same)."
    else:
        bound = "best" if result["governing_bound"] == "data_dependent" else "worst"
        message = (f"A run stops between {worst:,} and {best:,} {unit} "
                   f"(the {bound} case is the one privacy.bound={result['governing_bound']} can reach).")
    if 0 < result.get("max_steps", -1) < best < MAX_STEPS:
        message += f" method.max_steps={result['max_steps']:,} stops it there if that comes first."
    console.print(message)


def main(argv: list[str] | None = None) -> dict:
    overrides = sys.argv[1:] if argv is None else argv
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    result = plan(cfg)
    show(result)
    return result


def cli(argv: list[str] | None = None) -> None:
    """Entry point: `--help` prints the usage; a user's mistake is one error line and exit status 2."""
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        console.print(USAGE, highlight=False, markup=False, soft_wrap=True)
        return
    flags = [arg for arg in argv if arg.startswith("-")]
    if flags:
        fail(f"{' '.join(flags)}: the planner takes only Hydra overrides such as privacy.epsilon=1 (see --help)")
    check_config("config", argv)
    try:
        main(argv)
    except (ValueError, *USER_ERRORS) as err:
        fail(str(err))


if __name__ == "__main__":
    cli()
