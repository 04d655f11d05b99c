"""`python -m dpgen.audit method=<dpgan|dpcgan|gpate|dpmerf> data=<d> privacy.epsilon=<eps> [audit.canaries=m]`:
one training run with canaries (dpgen.audit.canaries: gradient canaries for the DP-SGD methods, vote canaries for
G-PATE, embedding canaries for DP-MERF, or with audit.dpmerf_stage=guide gradient canaries in its guide's DP-SGD),
then the one-run epsilon lower bound (dpgen.audit.bound) beside the
epsilon the run claims, in <run>/audit.json."""
from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from dpgen.audit.canaries import (AuditError, Canaries, EmbeddingCanaries, GradientCanaries, GuideCanaries,
                                  VoteCanaries)
from dpgen.callbacks.checkpoint_io import atomic_save
from dpgen.cli.common import CONF_DIR, USER_ERRORS, check_config, command_line, run_job
from dpgen.cli.train import run
from dpgen.files import atomic_write_text
from dpgen.audit.bound import audit_scores

THREAT_MODELS = {
    GradientCanaries: "white-box: Dirac gradient canaries, the privatized gradient sum of every DP-SGD step seen",
    VoteCanaries: "white-box: the teachers replaced by as many vote canaries, every query's answer seen",
    GuideCanaries: "white-box: Dirac gradient canaries in the DP-SGD steps of DP-MERF's guide, each privatized "
                   "gradient sum seen",
    EmbeddingCanaries: "white-box: embedding canaries of the sensitivity's norm, one coordinate of the feature sums "
                       "each, the one release seen and the clean sums known",
}


def audit(cfg: DictConfig, canaries: Canaries | None = None) -> dict:
    """Train `cfg` with `canaries` (default: by method, with `cfg.audit`'s settings) and write <run>/audit.json.
    The bound is compared with the data-independent epsilon where the run has one: the data-dependent bound is
    not itself a DP guarantee."""
    if not cfg.method.private:
        raise AuditError(f"method={cfg.method.name} claims no privacy: there is nothing to audit")
    if canaries is None:
        if cfg.method.name == "gpate":
            canaries = VoteCanaries(seed=cfg.audit.seed)
        elif cfg.method.name == "dpmerf" and cfg.audit.get("dpmerf_stage", "embedding") == "guide":
            canaries = GuideCanaries(cfg.audit.canaries, seed=cfg.audit.seed)
        elif cfg.method.name == "dpmerf":
            canaries = EmbeddingCanaries(cfg.audit.canaries, seed=cfg.audit.seed)
        else:
            canaries = GradientCanaries(cfg.audit.canaries, seed=cfg.audit.seed)
    results = run(cfg, extra_callbacks=(canaries,))
    privacy = results["privacy"]
    bound = audit_scores(canaries.scores.numpy(), canaries.included.numpy(), delta=cfg.privacy.delta,
                         significance=cfg.audit.significance)
    report = {
        "method": cfg.method.name, "data": cfg.data.name, "command": command_line("-m dpgen.audit"),
        "claimed_epsilon": privacy["epsilon"].get("data_independent", privacy["epsilon"][privacy["governing_bound"]]),
        "claimed_epsilon_by_bound": privacy["epsilon"], "delta": cfg.privacy.delta,
        "lower_bound": bound.epsilon, "confidence": 1 - bound.significance,
        "canaries": bound.canaries, "included": bound.included, "guesses": bound.guesses, "correct": bound.correct,
        "tried": [{"guesses": k, "correct": c} for k, c in bound.tried],
        "releases": canaries.releases, "steps": results["steps"], "wall_time_s": results["wall_time_s"],
        "threat_model": THREAT_MODELS[type(canaries)],
    }
    out = Path(cfg.output_dir)
    atomic_save({"scores": canaries.scores, "included": canaries.included}, out / "canaries.pt")  # to recompute
    atomic_write_text(out / "audit.json", json.dumps(report, indent=2) + "\n")
    print(f"audit: empirical epsilon >= {bound.epsilon:.3f} with {report['confidence']:.0%} confidence "
          f"({bound.correct} of {bound.guesses} guesses right, {bound.canaries} canaries); "
          f"claimed epsilon {report['claimed_epsilon']:.3f} at delta {cfg.privacy.delta}")
    return report


@hydra.main(config_path=str(CONF_DIR), config_name="audit", version_base="1.3")
def hydra_main(cfg: DictConfig) -> None:
    run_job(audit, cfg, (*USER_ERRORS, AuditError))


def main() -> None:
    check_config("audit")
    hydra_main()


if __name__ == "__main__":
    main()
