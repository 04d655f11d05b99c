"""python -m dpgen.audit: gradient canaries in a real DP-CGAN run, vote canaries in a real G-PATE run, embedding
canaries in a real DP-MERF run; the bound stays below the claim with the privacy noise, and a planted bug (the noise
switched off or weakened, here only) is caught."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from hydra import compose, initialize_config_dir

from dpgen.aggregation import mean_embedding
from dpgen.audit.__main__ import audit
from dpgen.audit.canaries import AuditError, EmbeddingCanaries, GradientCanaries, GuideCanaries
from dpgen.cli.common import CONF_DIR
from fixtures import write_image_folder
from inprocess import script_here

QUIET = ["logger=csv", "samples.every_n_steps=1000", "checkpoint_every_n_steps=1000",
         "progress_log_every_seconds=0"]
# 100 DP-SGD steps of DP-CGAN on MNIST at noise multiplier 2 (q = 600 / 60000): claimed eps about 0.4
# fake_term=public: generated samples clipped into the same sum would also move the canaries' quiet coordinates
# (grey early samples light every pixel's weights), weakening the audit; the accounting is the same either way
DPCGAN = ["data=mnist", "method=dpcgan_reference", "method.module.noise_multiplier=2", "method.max_steps=100",
          "method.module.fake_term=public"]


def run_audit(tmp_path, *overrides, canaries=None, releases=None):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("audit", overrides=[*QUIET, f"output_dir={tmp_path}", *overrides])
    report = audit(cfg, canaries)
    assert json.loads((tmp_path / "audit.json").read_text()) == report
    kept = torch.load(tmp_path / "canaries.pt")  # what the bound can be recomputed from
    assert len(kept["scores"]) == len(kept["included"]) == report["canaries"]
    assert len(report["tried"]) == 6 and all(0 <= t["correct"] <= t["guesses"] for t in report["tried"])
    assert report["releases"] == (cfg.method.max_steps if releases is None else releases)
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
    for overrides, message in [(["method=gan"], "claims no privacy"),
                               (["method=pategan"], "trains no discriminator with DP-SGD")]:
        result = script_here("-m dpgen.audit", *overrides, "method.max_steps=1", "eval=none",
                             f"hydra.run.dir={tmp_path / overrides[0].replace('=', '_')}", cwd=tmp_path)
        assert result.returncode == 2 and message in result.stderr + result.stdout, result.stderr[-2000:]


# G-PATE with 400 small teachers and 20 samples per step (200 queries), 60 steps: 12,000 vote-canary queries
GPATE = ["data=mnist", "method=gpate", "method.n_teachers=400", "method.batch_size=20", "method.max_steps=60",
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


def tiny_dpmerf(tmp_path) -> list[str]:
    """DP-MERF at eps = 1 on 16 tiny images in 2 classes with D = 1000 features: 2 x 1001 coordinates of the
    released sums for 1000 embedding canaries. The release is made at fit start: one training step is enough."""
    root = write_image_folder(tmp_path / "images")
    return ["method=dpmerf", "method.batch_size=8", "method.module.n_features=1000", "method.max_steps=1",
            "privacy.epsilon=1", "data=image_folder", f"data.path={root}", "data.image_size=28", "data.channels=1"]


def release_params(run) -> dict:
    return json.loads((run / "privacy.json").read_text())["mechanisms"][mean_embedding.MECHANISM]["params"][0]


def test_dpmerf_embedding_canaries_with_the_noise_stay_below_the_claim(tmp_path):
    canaries = EmbeddingCanaries(1000)
    report = run_audit(tmp_path / "run", *tiny_dpmerf(tmp_path), canaries=canaries, releases=1)
    assert report["canaries"] == 1000 and report["steps"] == 1
    assert abs(report["claimed_epsilon"] - 1) < 1e-6 and report["lower_bound"] <= report["claimed_epsilon"]
    # a score is the canary (Delta = sqrt(1 + a^2) if included) plus the release's noise N(0, sigma^2) there
    params = release_params(tmp_path / "run")
    delta, sigma = params["sensitivity"], params["sigma"]
    included, excluded = canaries.scores[canaries.included].double(), canaries.scores[~canaries.included].double()
    assert abs(excluded.std().item() / sigma - 1) < 0.1
    assert abs(excluded.mean().item()) < 4 * sigma / len(excluded) ** 0.5
    shift = included.mean().item() - excluded.mean().item()
    assert abs(shift - delta) < 4 * sigma * (1 / len(included) + 1 / len(excluded)) ** 0.5


def test_dpmerf_planted_bug_weak_noise_is_caught(tmp_path, monkeypatch):
    # the bug: the release adds noise of std sigma / 100 while the ledger still charges sigma
    release = mean_embedding.release

    def weak_noise(chunks, features, num_classes, a, sigma):
        return dataclasses.replace(release(chunks, features, num_classes, a, sigma / 100), sigma=sigma)

    monkeypatch.setattr(mean_embedding, "release", weak_noise)
    canaries = EmbeddingCanaries(1000)
    report = run_audit(tmp_path / "run", *tiny_dpmerf(tmp_path), canaries=canaries, releases=1)
    assert abs(report["claimed_epsilon"] - 1) < 1e-6 and report["lower_bound"] > 3
    # the canaries stand out of noise of std sigma / 100 = 0.037 Delta: every guess is right
    delta = release_params(tmp_path / "run")["sensitivity"]
    assert torch.equal(canaries.scores > delta / 2, canaries.included)
    assert all(t["correct"] == min(t["guesses"], report["included"]) for t in report["tried"])


def test_dpmerf_more_canaries_than_released_sums_is_refused_and_the_release_put_back(tmp_path):
    release, sums = mean_embedding.release, mean_embedding.embedding_sums
    with pytest.raises(AuditError, match="3000 embedding canaries .* have 2002"):
        run_audit(tmp_path / "run", *tiny_dpmerf(tmp_path), "audit.canaries=3000")
    assert mean_embedding.release is release and mean_embedding.embedding_sums is sums


# DP-MERF with a guide: 20 DP-SGD steps of the guide at q = 7 / 14 (the tiny images less their test split), release
# and guide together at eps = 1; eval.selection=private_val as the experiment files set it (an audit run evaluates
# nothing and holds no split)
GUIDED = ["privacy.conversion=improved", "+method.module.guide={epochs:10,batch_size:7}", "audit.dpmerf_stage=guide",
          "+eval.selection=private_val"]


def test_guide_canaries_with_the_noise_stay_below_the_claim(tmp_path):
    canaries = GuideCanaries(1000)
    report = run_audit(tmp_path / "run", *tiny_dpmerf(tmp_path), *GUIDED, canaries=canaries, releases=20)
    assert abs(report["claimed_epsilon"] - 1) < 1e-5 and report["lower_bound"] <= report["claimed_epsilon"]
    assert canaries.rate == 0.5 and report["threat_model"].startswith("white-box: Dirac gradient canaries in the")


def test_guide_planted_bug_no_noise_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr("opacus.optimizers.optimizer._generate_noise",
                        lambda std, reference, generator=None, secure_mode=False: torch.zeros_like(reference))
    canaries = GuideCanaries(1000)
    report = run_audit(tmp_path / "run", *tiny_dpmerf(tmp_path), *GUIDED, canaries=canaries, releases=20)
    assert report["lower_bound"] > 2 * report["claimed_epsilon"]
    # without noise an included canary scores C = 0.1 each time one of the 20 steps samples it (at rate 1/2)
    included = canaries.scores[canaries.included]
    assert (included > 0.05).float().mean() > 0.99


def test_guide_canaries_need_a_guide(tmp_path):
    with pytest.raises(AuditError, match="guide canaries"):
        run_audit(tmp_path / "run", *tiny_dpmerf(tmp_path), "audit.dpmerf_stage=guide")
