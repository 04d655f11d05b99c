"""python -m dpgen.audit: gradient canaries in a real DP-CGAN run, vote canaries in a real G-PATE run; the bound
stays below the claim with the privacy noise, and a planted bug (the noise switched off, here only) is caught."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir

from dpgen.audit.__main__ import audit
from dpgen.audit.canaries import GradientCanaries
from dpgen.cli.common import CONF_DIR

QUIET = ["data=mnist", "logger=csv", "samples.every_n_steps=1000", "checkpoint_every_n_steps=1000",
         "progress_log_every_seconds=0"]
# 100 DP-SGD steps of DP-CGAN on MNIST at noise multiplier 2 (q = 600 / 60000): claimed eps about 0.4
DPCGAN = ["method=dpcgan", "method.module.noise_multiplier=2", "method.max_steps=100"]


def run_audit(tmp_path, *overrides, canaries=None):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("audit", overrides=[*QUIET, f"output_dir={tmp_path}", *overrides])
    report = audit(cfg, canaries)
    assert json.loads((tmp_path / "audit.json").read_text()) == report
    kept = torch.load(tmp_path / "canaries.pt")  # what the bound can be recomputed from
    assert len(kept["scores"]) == len(kept["included"]) == report["canaries"]
    assert len(report["tried"]) == 6 and all(0 <= t["correct"] <= t["guesses"] for t in report["tried"])
    assert report["releases"] == cfg.method.max_steps
    return report


@pytest.mark.slow
def test_audit_with_the_privacy_noise_stays_below_the_claim(tmp_path):
    report = run_audit(tmp_path, *DPCGAN)
    assert report["canaries"] == 1000
    assert 0.2 < report["claimed_epsilon"] < 1
    assert report["lower_bound"] <= report["claimed_epsilon"]


def test_planted_bug_no_noise_is_caught(tmp_path, monkeypatch):
    # the bug: Opacus adds no noise while the ledger still charges the configured noise multiplier
    monkeypatch.setattr("opacus.optimizers.optimizer._generate_noise",
                        lambda std, reference, generator=None, secure_mode=False: torch.zeros_like(reference))
    canaries = GradientCanaries(1000)
    steps = 40  # each included canary is sampled at least once in 40 steps with probability 1 - 0.99^40 = 0.33
    report = run_audit(tmp_path, *DPCGAN, f"method.max_steps={steps}", canaries=canaries)
    assert report["lower_bound"] > 2 * report["claimed_epsilon"] and report["lower_bound"] > 2
    # without noise an included canary's score is C = 1.1 per time it was sampled, plus the real records'
    # small gradients on its coordinate, which excluded canaries see too
    included, excluded = canaries.scores[canaries.included], canaries.scores[~canaries.included]
    sampled = 1 - (1 - canaries.rate) ** steps
    assert abs((included > 0.5).float().mean() - sampled) < 0.07 and (excluded.abs() < 0.5).float().mean() > 0.9


def test_audit_refuses_what_it_cannot_audit(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for overrides, message in [(["method=gan"], "claims no privacy"),
                               (["method=pategan"], "trains no discriminator with DP-SGD")]:
        cmd = [sys.executable, "-m", "dpgen.audit", *overrides, "method.max_steps=1", "eval=none",
               f"hydra.run.dir={tmp_path / overrides[0].replace('=', '_')}"]
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 2 and message in result.stderr + result.stdout, result.stderr[-2000:]


# G-PATE with 400 small teachers and 20 samples per step (200 queries), 60 steps: 12,000 vote-canary queries
GPATE = ["method=gpate", "method.n_teachers=400", "method.batch_size=20", "method.max_steps=60",
         "method.module.teachers.channels=[4,4]", "method.module.teachers.hidden=8",
         "method.module.aggregator.sigma1=1500", "method.module.aggregator.sigma2=1500"]


@pytest.mark.slow
def test_gpate_vote_canaries(tmp_path, monkeypatch):
    noisy = run_audit(tmp_path / "noisy", *GPATE)
    assert noisy["canaries"] == 400 and noisy["releases"] == 60
    assert noisy["lower_bound"] <= noisy["claimed_epsilon"] < 1.5

    def no_noise(votes, n_teachers, p, generator=None):  # the planted bug: Confident-GNMax without its noise
        v = votes.to(torch.float64)
        return v.max(1).values >= p.threshold * n_teachers, v.argmax(1)

    monkeypatch.setattr("dpgen.aggregation.dpgradagg.confident_gnmax", no_noise)
    planted = run_audit(tmp_path / "planted", *GPATE)
    # the claim grows a little without noise (more queries answered, and each answer is charged)
    assert planted["claimed_epsilon"] < 1.5 and planted["lower_bound"] > 2 * planted["claimed_epsilon"]
