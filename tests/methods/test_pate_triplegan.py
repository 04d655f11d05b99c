"""PATE-TripleGAN (dpgen.methods.pate_triplegan, dpgen.aggregation.hybrid) on a tiny table."""
import json
import math
import warnings

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from opacus.accountants.analysis.rdp import compute_rdp
from scipy.optimize import brentq
from scipy.stats import norm

from clipping import clipped_sum
from teacher_spy import spy_teacher_records
from dpgen.aggregation import hybrid
from dpgen.callbacks.privacy_budget import PrivacyBudget
from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.data.partition import partition_indices
from dpgen.methods import pate_triplegan
from dpgen.methods.pate_triplegan import PATETripleGAN
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp

warnings.filterwarnings("ignore")

RECORDS, FEATURES, TEACHERS, PARTITIONS, BATCH = 400, 4, 8, 10, 16  # percent = 8 / 10


class Toy(DPGenDataModule):
    """400 records; feature 0 is the record index / 400; class 1 (every 4th record) sits around 0.75.
    `relabel` flips the labels of the records in partitions >= 8 (the unlabelled ones)."""

    name, kind, shape, num_classes, class_names = "toy", "table", (FEATURES,), 2, ["a", "b"]

    def __init__(self, relabel: bool = False, **kw):
        super().__init__(**kw)
        self.relabel = relabel

    def load(self):
        g = torch.Generator().manual_seed(0)
        y = (torch.arange(RECORDS) % 4 == 0).long()
        x = (0.25 + 0.5 * y[:, None] + 0.05 * torch.randn(RECORDS, FEATURES, generator=g)).clamp(0, 1)
        x[:, 0] = torch.arange(RECORDS) / RECORDS
        if self.relabel:
            unlabelled = torch.cat(partition_indices(x.float(), PARTITIONS, self.seed)[TEACHERS:])
            y[unlabelled] = 1 - y[unlabelled]
        return TensorData(x.float(), y), TensorData(x[:50].float(), y[:50])


def tiny(**kw):
    args = dict(n_teachers=TEACHERS, percent=TEACHERS / PARTITIONS, batch_size=BATCH, teacher_steps=2, z_dim=8,
                lr=1e-3, sigma1=2.0, sigma2=2.0, teachers=dict(hidden=16), generator=dict(hidden=[16]),
                student=dict(hidden=[16]), classifier=dict(hidden=8))
    args.update(kw)
    return PATETripleGAN((FEATURES,), 2, "table", **args)


def fit(model, steps, callbacks=(), root=None, relabel=False):
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=list(callbacks), default_root_dir=root)
    dm = Toy(relabel=relabel, batch_size=2 * BATCH, n_teachers=PARTITIONS)
    trainer.fit(model, datamodule=dm)
    return trainer, dm


def test_teachers_see_only_their_labelled_partition(monkeypatch):
    model = tiny()
    seen = spy_teacher_records(model, monkeypatch, RECORDS)
    _, dm = fit(model, steps=4)
    assert len(seen) == 4 * 2 and seen[0].shape == (TEACHERS, BATCH)
    for t in range(TEACHERS):
        assert set(torch.cat([s[t] for s in seen]).tolist()) <= set(dm.partitions[t].tolist())
    labelled = sum(len(p) for p in dm.partitions[:TEACHERS])
    assert model.labelled.sum() == labelled and abs(labelled - 320) < 40  # percent 0.8: 8 of 10 hashed partitions


def test_labels_of_unlabelled_records_change_nothing():
    """Same seeds and (test-fixed) noise: flipping every unlabelled record's label leaves the run identical."""
    runs = []
    for relabel in (False, True):
        torch.manual_seed(0)
        model = tiny()
        fit(model, steps=3, relabel=relabel)
        runs.append(torch.cat([p.detach().flatten() for p in model.generator.parameters()]))
    assert torch.equal(runs[0], runs[1])


def test_every_query_and_every_dpsgd_step_is_charged(monkeypatch):
    model = tiny(vote_charge="answered")  # the paper's charge: only answered queries pay a vote
    answered = []
    vote = hybrid.noisy_vote

    def spy(logits, p, generator):
        release = vote(logits, p, generator)
        answered.append(int(release.answered.sum()))
        return release

    monkeypatch.setattr(hybrid, "noisy_vote", spy)
    fit(model, steps=5)
    mech = model.ledger.summary(1e-5)["mechanisms"]
    assert mech[hybrid.THRESHOLD]["count"] == 5 * BATCH  # one threshold check per generator pair
    assert mech[hybrid.VOTE]["count"] == sum(answered) and 0 < sum(answered) < 5 * BATCH
    assert mech[hybrid.DPSGD]["count"] == 5
    assert mech[hybrid.DPSGD]["params"] == [{"sample_rate": BATCH / RECORDS, "noise_multiplier": 0.4}]


def test_dpsgd_batches_have_their_own_size_and_are_charged_at_it(monkeypatch):
    model, sizes = tiny(dpsgd_batch_size=40), []
    batch = PATETripleGAN.private_batch

    def spy(self):
        x, y, labelled = batch(self)
        sizes.append(len(x))
        return x, y, labelled

    monkeypatch.setattr(PATETripleGAN, "private_batch", spy)
    fit(model, steps=20)
    mech = model.ledger.summary(1e-5)["mechanisms"]
    assert mech[hybrid.THRESHOLD]["count"] == 20 * BATCH  # the votes' queries keep batch_size
    assert mech[hybrid.DPSGD]["params"] == [{"sample_rate": 40 / RECORDS, "noise_multiplier": 0.4}]
    assert model.poisson.loader.sample_rate == 40 / RECORDS
    assert model.dp_optimizer.expected_batch_size == 40  # the noisy sum is averaged over the expected batch
    assert len(sizes) == 20 and 20 * 30 < sum(sizes) < 20 * 50  # Poisson(40) x 20: mean 800, std 28
    with pytest.raises(ValueError, match="dpsgd_batch_size"):
        tiny(dpsgd_batch_size=0)


def test_vote_charge_every_charges_each_query_as_answered_and_plans_no_best_case():
    release = hybrid.VoteRelease(np.zeros((10, 2)), np.arange(10) < 4, np.ones(10))
    for charge, charged in [("answered", 4), ("every", 10)]:
        p = hybrid.HybridParams(sigma1=20.0, sigma2=10.0, vote_charge=charge)
        model = tiny(vote_charge=charge)
        hybrid.record(model.ledger, p, release, 0.04)
        assert model.ledger.summary(1e-5)["mechanisms"][hybrid.VOTE]["count"] == charged
        cost = hybrid.step_cost(p, 10, 1, 0.04, DEFAULT_ORDERS)
        assert (cost.best["gdp_mu"] == cost.worst["gdp_mu"]) == (charge == "every")
        assert cost.worst["gdp_mu"] == pytest.approx(math.sqrt(10 / 400 + 10 * 2 / 100))  # 10 checks, 10 votes
    with pytest.raises(ValueError, match="vote_charge"):
        hybrid.HybridParams(vote_charge="some")


def gdp_epsilon(mu, delta):
    """Dong et al. 2022 Cor. 2.13: delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2), solved for eps."""
    return brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta, 0, 200)


def test_gdp_epsilon_equals_a_hand_computation_and_rdp_cross_checks_it():
    """Vote history: 50 threshold checks at sigma1 = 20 (mu 1/20 each), 30 answered at sigma2 = 10 (mu sqrt2/10),
    4 DP-SGD steps with q = 0.04, sigma = 0.4, accounted as the paper (Bu et al.: mu = q sqrt(e^{1/sigma^2} - 1)).
    mu^2 = 50/400 + 30 * 2/100 + 4 * 0.0016 (e^6.25 - 1) = 0.125 + 0.6 + 3.3089 = 4.0339."""
    p = hybrid.HybridParams(sigma1=20.0, sigma2=10.0, noise_multiplier=0.4, accounting="clt")
    model = tiny()
    release = hybrid.VoteRelease(np.zeros((50, 2)), np.arange(50) < 30, np.ones(50))
    hybrid.record(model.ledger, p, release, 0.04)
    for _ in range(3):
        hybrid.record(model.ledger, p, hybrid.VoteRelease(np.zeros((0, 2)), np.zeros(0, bool), np.zeros(0)), 0.04)
    mu = math.sqrt(50 / 400 + 30 * 2 / 100 + 4 * 0.04**2 * math.expm1(1 / 0.16))
    assert model.ledger.mu() == pytest.approx(mu, rel=1e-12) and mu == pytest.approx(math.sqrt(4.0339), rel=1e-5)
    eps_gdp, _ = model.ledger.epsilon(1e-5, conversion="gdp")
    assert eps_gdp == pytest.approx(gdp_epsilon(mu, 1e-5), rel=1e-8)
    # cross-check: the same releases through RDP (a mu-GDP release is (a, a mu^2/2)-RDP) give a larger eps
    eps_rdp, _ = model.ledger.epsilon(1e-5, conversion="classical")
    assert eps_rdp == pytest.approx(eps_from_rdp(DEFAULT_ORDERS * mu**2 / 2, DEFAULT_ORDERS, 1e-5)[0])
    assert eps_gdp < eps_rdp < 1.5 * eps_gdp


def test_rdp_accounting_of_the_dpsgd_part_matches_opacus():
    """accounting="rdp": the votes' GDP joins as a mu^2 a / 2 RDP curve, DP-SGD is Opacus' subsampled Gaussian."""
    p = hybrid.HybridParams(sigma1=20.0, sigma2=10.0, noise_multiplier=0.4, accounting="rdp")
    model = tiny()
    for _ in range(4):
        hybrid.record(model.ledger, p, hybrid.VoteRelease(np.zeros((10, 2)), np.arange(10) < 6, np.ones(10)), 0.04)
    votes_mu_sq = 40 / 400 + 24 * 2 / 100
    rdp = np.asarray(compute_rdp(q=0.04, noise_multiplier=0.4, steps=4, orders=list(DEFAULT_ORDERS)))
    expected = eps_from_rdp(rdp + DEFAULT_ORDERS * votes_mu_sq / 2, DEFAULT_ORDERS, 1e-5)[0]
    assert model.ledger.epsilon(1e-5, "data_independent")[0] == pytest.approx(expected, rel=1e-10)
    with pytest.raises(ValueError, match="GDP releases only"):
        model.ledger.epsilon(1e-5, conversion="gdp")


def test_budget_stops_before_exceeding(tmp_path):
    """clt accounting, GDP conversion: each step announces mu_step^2 = 16 (1/400 + 2/400) + q^2 (e^6.25 - 1)
    with q = 16/400 (sigma1 = sigma2 = 20); training stops at the last T with eps(sqrt(T) mu_step) <= 10."""
    model = tiny(accounting="clt", sigma1=20.0, sigma2=20.0)
    step_mu_sq = BATCH * (1 / 400 + 2 / 400) + (BATCH / RECORDS) ** 2 * math.expm1(1 / 0.16)
    fits = max(t for t in range(1, 100) if gdp_epsilon(math.sqrt(t * step_mu_sq), 1e-5) <= 10.0)
    assert 2 <= fits < 30
    budget = PrivacyBudget(epsilon=10.0, delta=1e-5, bound="data_independent", conversion="gdp")
    trainer, _ = fit(model, steps=100, callbacks=[budget], root=str(tmp_path))
    assert trainer.global_step == fits
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["epsilon"] <= 10.0 and report["stop"]["discarded_steps"] == 0
    assert "asymptotic_warning" in report  # the paper's CLT mu is flagged as an approximation


def test_pld_budget_is_checked_after_each_step_and_rolls_back(tmp_path):
    """conversion=pld composes votes (Gaussians) and DP-SGD (subsampled Gaussians) exactly: the run ends with the
    last in-budget step, the one that went over rolled back, and a smaller epsilon than RDP gives the same steps."""
    model = tiny(sigma1=20.0, sigma2=20.0, noise_multiplier=1.0)
    budget = PrivacyBudget(epsilon=4.0, delta=1e-5, bound="data_independent", conversion="pld")
    trainer, _ = fit(model, steps=200, callbacks=[budget], root=str(tmp_path))
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["conversion"] == "pld" and report["stop"]["discarded_steps"] == 1
    assert report["epsilon"] <= 4.0 and 2 < trainer.global_step < 200
    assert report["epsilon"] < report["total"]["data_independent"]["improved"]["epsilon"]
    assert model.pld_ready and not tiny(accounting="clt").pld_ready


def test_pld_with_the_papers_answered_only_vote_charge_is_refused(tmp_path):
    """vote_charge=answered charges a number of votes that the checks choose: no proof covers its PLD composition,
    so a run under conversion=pld is refused before its first step, not reported as a bound."""
    model = tiny(sigma1=20.0, sigma2=20.0, noise_multiplier=1.0, vote_charge="answered")
    assert not model.pld_ready
    budget = PrivacyBudget(epsilon=4.0, delta=1e-5, bound="data_independent", conversion="pld")
    with pytest.raises(Exception, match="vote_charge=every"):
        fit(model, steps=5, callbacks=[budget], root=str(tmp_path))


def test_tiny_run_lowers_the_teacher_loss(monkeypatch):
    """Measured over six noise seeds: teacher loss 1.387 -> 1.27-1.28 (mean of the last 5 of 30 steps). The
    classifier's loss stays at chance (0.68-0.76) on this toy even after 120 steps, so it is not asserted: C
    learns only from generator pairs, and the generator's samples do not depend on their label yet (mean
    feature 0.31 for both classes at step 120, 0.41 / 0.54 at step 520; the data: 0.25 / 0.75)."""
    monkeypatch.setattr(pate_triplegan, "secret_generator",  # the run's noise and sampling, made repeatable
                        lambda device=None: torch.Generator(device=device or "cpu").manual_seed(0))
    model = tiny(sigma1=0.5, sigma2=0.5)
    model.log_private = True  # the teacher loss is computed on private records: logged only when asked
    losses = []
    log_dict = model.log_dict
    model.log_dict = lambda d, **kw: (losses.append({k: float(v) for k, v in d.items()}), log_dict(d, **kw))
    fit(model, steps=30)
    teachers = [step["private/loss/teachers"] for step in losses]
    assert np.mean(teachers[-5:]) < 0.95 * teachers[0]


def test_student_is_opacus_ready_and_the_partition_count_is_checked():
    model = tiny()
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.student.modules())
    with pytest.raises(ValueError, match="needs the datamodule split into 10 partitions"):
        trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)
        trainer.fit(model, datamodule=Toy(batch_size=2 * BATCH, n_teachers=TEACHERS))


def per_pair_gradient(model, pairs) -> list[torch.Tensor]:
    """The student's gradient summed pair by pair on a plain copy: (weight, x, y, target, clipped) terms, each
    clipped to C where asked."""
    net = model.student._module
    terms = [(weight * torch.nn.functional.binary_cross_entropy_with_logits(net(x[None], y[None]).view(-1),
                                                                            target.view(1)), clipped)
             for weight, x, y, target, clipped in pairs]
    return clipped_sum(list(net.parameters()), terms, model.max_grad_norm)


@pytest.mark.parametrize("gen_pairs, pair_target, dpsgd_batch", [
    ("clipped", "agree", None), ("public", "agree", None), ("clipped", "labelled", None),
    ("clipped", "own_label", None), ("clipped", "own_label", 40), ("public", "own_label", 40)])
def test_the_student_step_clips_what_gen_pairs_says_and_nothing_else(monkeypatch, gen_pairs, pair_target, dpsgd_batch):
    """...and each record's pair is real as pair_target says: labelled and C agrees with its label, or labelled;
    own_label: a labelled record paired with its own label, an unlabelled one with C's. Each term is an average:
    the records' over the expected DP-SGD batch, the generator pairs' over the queries (clipped) or the answers."""
    torch.manual_seed(0)
    model = tiny(gen_pairs=gen_pairs, pair_target=pair_target, max_grad_norm=0.05, dpsgd_batch_size=dpsgd_batch)
    fit(model, 1)
    model.dp_optimizer.noise_multiplier = 0.0  # the update itself is under test, not the noise
    u, uy = model.generated(BATCH)
    u, uy = u.detach(), uy.detach()
    model.generated = lambda n: (u, uy)
    answered = np.arange(BATCH) % 3 != 0  # a fixed release: a third unanswered, labels alternate
    labels = (np.arange(BATCH) % 2).astype(float)
    monkeypatch.setattr(hybrid, "noisy_vote", lambda *a: hybrid.VoteRelease(np.zeros((BATCH, 2)), answered, labels))
    x, y = Toy().load()[0][:20]
    labelled = torch.arange(20) % 2 == 0
    model.private_batch = lambda: (x, y, labelled)
    seen = []
    model.dp_optimizer.original_optimizer.step = lambda *a, **k: seen.append(
        [p.grad.detach().clone() for p in model.student.parameters()])
    _, answered_share, real_share = model.student_step()
    assert answered_share == pytest.approx(answered.mean()) and real_share == pytest.approx(labels[answered].mean())
    with torch.no_grad():
        yc = model.classifier(x).argmax(1)
    real = (labelled & (yc == y)).float() if pair_target == "agree" else labelled.float()
    pair_y = torch.where(labelled, y, yc) if pair_target == "own_label" else yc
    assert 0 < (labelled & (yc != y)).sum() < labelled.sum()  # the two targets differ on this batch
    records = per_pair_gradient(model, [(model.alpha, xi, yi, ti, True) for xi, yi, ti in zip(x, pair_y, real)])
    keep = torch.as_tensor(answered)
    targets = torch.as_tensor(labels, dtype=torch.float32)[keep]
    generated = per_pair_gradient(model, [(1 - model.alpha, ui, yi, ti, gen_pairs == "clipped")
                                          for ui, yi, ti in zip(u[keep], uy[keep], targets)])
    # the records' clipped sum over the expected DP-SGD batch; the answered pairs' sum over the queries (clipped,
    # with one batch size one Opacus sum over the expected batch) or their mean (public)
    divisor = BATCH if gen_pairs == "clipped" else int(keep.sum())
    expected = [r / (dpsgd_batch or BATCH) + g / divisor for r, g in zip(records, generated)]
    for got, want in zip(seen[0], expected):
        assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()
    # with C this small every clipped term has norm C: unclipped, the generator pairs' part is far larger
    unclipped = per_pair_gradient(model, [(1 - model.alpha, ui, yi, ti, False)
                                          for ui, yi, ti in zip(u[keep], uy[keep], targets)])
    assert (sum(g.norm() ** 2 for g in unclipped) ** 0.5).item() > 10 * 0.05 * int(keep.sum()) / BATCH
    with pytest.raises(ValueError, match="gen_pairs"):
        tiny(gen_pairs="none")
    with pytest.raises(ValueError, match="pair_target"):
        tiny(pair_target="none")
