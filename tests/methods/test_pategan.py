"""PATE-GAN (dpgen.methods.pategan, dpgen.aggregation.pate_vote): each known bug of public PATE-GAN code
(Ganev et al. 2024, arXiv 2406.13985) impossible by construction or tested here."""
import json
import math
import warnings

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from dpgen.aggregation import pate_vote
from dpgen.callbacks.privacy_budget import PrivacyBudget
from dpgen.cli.common import CONF_DIR
from dpgen.cli.train import build_datamodule, build_method
from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.methods.pategan import MECHANISM, PATEGAN
from dpgen.privacy.rdp import DEFAULT_ORDERS
from teacher_spy import spy_teacher_records

warnings.filterwarnings("ignore")

TEACHERS, RECORDS, FEATURES = 8, 400, 4


class Toy(DPGenDataModule):
    """400 records, 4 features; feature 0 is the record's index / 400 (so a batch tells which records it
    holds), features 1-3 sit around 0.25 (class 0) or 0.75 (class 1, every 4th record)."""

    name, kind, shape, num_classes, class_names = "toy", "table", (FEATURES,), 2, ["a", "b"]

    def load(self):
        g = torch.Generator().manual_seed(0)
        y = (torch.arange(RECORDS) % 4 == 0).long()
        x = (0.25 + 0.5 * y[:, None] + 0.05 * torch.randn(RECORDS, FEATURES, generator=g)).clamp(0, 1)
        x[:, 0] = torch.arange(RECORDS) / RECORDS
        return TensorData(x.float(), y), TensorData(x[:50].float(), y[:50])


def tiny(**kw):
    args = dict(n_teachers=TEACHERS, lam=1.0, batch_size=16, z_dim=8, lr=1e-3, teachers=dict(hidden=16),
                generator=dict(hidden=[16]), student=dict(hidden=[16]))
    args.update(kw)
    return PATEGAN((FEATURES,), 2, "table", **args)


def fit(model, steps, callbacks=(), root=None, teacher_batch=40):
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=list(callbacks), default_root_dir=root)
    dm = Toy(batch_size=teacher_batch, n_teachers=TEACHERS)
    trainer.fit(model, datamodule=dm)
    return trainer, dm


def test_a_teacher_never_sees_a_record_outside_its_partition(monkeypatch):
    model = tiny()
    seen = spy_teacher_records(model, monkeypatch, RECORDS)
    _, dm = fit(model, steps=6)
    assert len(seen) == 6 * model.teacher_steps  # n_T teacher steps per generator step
    for t, part in enumerate(dm.partitions):
        records = torch.cat([s[t] for s in seen])
        assert len(records) == 6 * 40  # b = 40 / 5 = 8 records per teacher step, 5 steps, 6 iterations
        assert set(records.tolist()) <= set(part.tolist())
    # the partitions are fixed for the run and disjoint
    assert sum(len(p) for p in dm.partitions) == len(torch.cat(dm.partitions).unique()) == RECORDS


def spy_logs(model) -> list:
    """Every dict the model logs, as floats, in order (the model still logs it)."""
    logged = []
    log_dict = model.log_dict
    model.log_dict = lambda d, **kw: (logged.append({k: float(v) for k, v in d.items()}), log_dict(d, **kw))
    return logged


def test_teacher_warmup_trains_teachers_on_their_own_records_without_charging(monkeypatch):
    """teacher_warmup = 3: three extra rounds of n_T teacher steps before the first vote, each on the teacher's
    own records only; no query is made or charged for them, and they happen once per run."""
    model = tiny(teacher_warmup=3)
    seen = spy_teacher_records(model, monkeypatch, RECORDS)
    _, dm = fit(model, steps=4)
    assert len(seen) == (4 + 3) * model.teacher_steps
    for t, part in enumerate(dm.partitions):
        assert set(torch.cat([s[t] for s in seen]).tolist()) <= set(part.tolist())
    assert model.ledger.summary(1e-5)["mechanisms"][MECHANISM]["count"] == 4 * model.queries_per_step()
    assert bool(model.warmed_up)
    with pytest.raises(ValueError, match="teacher_warmup"):
        tiny(teacher_warmup=-1)


def test_laplace_scale_is_one_over_lam():
    """Two classes, votes (fake, real) = (6, 4): the label is real iff L_real - L_fake > 2. For i.i.d.
    Lap(b) noise the difference D has Pr[D > d] = e^{-d/b} (1 + d/(2b)) / 2 (d >= 0). With lam = 0.5 the
    scale is b = 1/lam = 2: Pr = e^{-1} (1.5) / 2 = 0.2759. Noise of scale lam (= 0.5, the public-code bug)
    would give e^{-4} * 3 / 2 = 0.0275."""
    n = 20000
    logits = torch.cat([-torch.ones(6, n), torch.ones(4, n)])  # 6 teachers say fake, 4 say real, n queries
    rng = np.random.default_rng(0)
    release = pate_vote.laplace_vote_batch(logits, 0.5, DEFAULT_ORDERS, rng)
    assert (release.votes == [6.0, 4.0]).all()
    expected = math.exp(-1.0) * 1.5 / 2
    std = math.sqrt(expected * (1 - expected) / n)
    assert abs(release.labels.mean() - expected) < 4 * std


def test_every_labelled_sample_is_charged(monkeypatch):
    model = tiny()
    queries = []
    predict = model.ensemble.predict_logits

    def spy(x, y):
        queries.append(len(x))
        return predict(x, y)

    monkeypatch.setattr(model.ensemble, "predict_logits", spy)
    fit(model, steps=4)
    entry = model.ledger.summary(1e-5)["mechanisms"][MECHANISM]
    assert len(queries) == 4 * model.student_steps  # n_S student steps per generator step
    assert entry["count"] == sum(queries) == 4 * 5 * 16
    assert entry["params"] == [{"lam": 1.0, "laplace_scale": 1.0, "n_teachers": TEACHERS}]
    # the data-independent total is count x 2 lam^2 a (Papernot et al. 2017, Thm. 2)
    np.testing.assert_allclose(model.ledger.rdp("data_independent"), 320 * 2.0 * DEFAULT_ORDERS)


def hand_epsilon(vote_history, lam, delta):
    """PATE-GAN Algorithm 1 lines 17-19 and 25, written out independently, at the orders the ledger uses.
    For an integer moment l = a - 1: alpha(l) += 2 lam^2 l (l+1) unless q < (e^{2lam} - 1)/(e^{4lam} - 1),
    then the min with log((1-q) ((1-q)/(1 - e^{2lam} q))^l + q e^{2 lam l}); q = (2 + lam g)/(4 e^{lam g}),
    g = |n0 - n1|; eps = (alpha(l) + log 1/delta) / l. At a non-integer order only the data-independent
    RDP 2 lam^2 a per query is known: eps = n 2 lam^2 a + log(1/delta) / (a - 1)."""
    best = math.inf
    for a in DEFAULT_ORDERS:
        l = a - 1
        if l == int(l):
            l = int(l)
            alpha = 0.0
            for n0, n1 in vote_history:
                g = abs(n0 - n1)
                q = (2 + lam * g) / (4 * math.exp(lam * g))
                worst = 2 * lam**2 * l * (l + 1)
                if q < (math.exp(2 * lam) - 1) / (math.exp(4 * lam) - 1):
                    dd = math.log((1 - q) * ((1 - q) / (1 - math.exp(2 * lam) * q)) ** l + q * math.exp(2 * lam * l))
                    worst = min(worst, dd)
                alpha += worst
            best = min(best, (alpha + math.log(1 / delta)) / l)
        else:
            best = min(best, len(vote_history) * 2 * lam**2 * a + math.log(1 / delta) / (a - 1))
    return best


def test_epsilon_equals_a_hand_computation_for_a_vote_history():
    """20 teachers, lam = 0.3; votes (fake, real): unanimous, 17/3, 12/8, 10/10 (the last two fail the
    validity condition: q >= (e^0.6 - 1)/(e^1.2 - 1) = 0.3543, so they cost the data-independent value)."""
    model = tiny(n_teachers=20, lam=0.3)
    history = [(20, 0)] * 5 + [(17, 3)] * 3 + [(12, 8)] * 2 + [(10, 10)]
    logits = torch.tensor([[-1.0] * f + [1.0] * r for f, r in history]).T  # (teachers, queries)
    release = pate_vote.laplace_vote_batch(logits, 0.3, model.orders, np.random.default_rng(0))
    model.ledger.record(MECHANISM, release.rdp, count=release.count)
    eps, _ = model.ledger.epsilon(1e-5, "data_dependent")
    assert eps == pytest.approx(hand_epsilon(history, 0.3, 1e-5), rel=1e-9)
    # the validity condition matters: 12/8 has q = (2 + 1.2)/(4 e^1.2) = 0.2410 < 0.3543 (kept), 10/10 has q = 0.5
    assert (2 + 0.3 * 4) / (4 * math.exp(1.2)) < (math.exp(0.6) - 1) / (math.exp(1.2) - 1) < 0.5
    eps_di, _ = model.ledger.epsilon(1e-5, "data_independent")
    assert eps < eps_di


def test_budget_stops_before_exceeding_under_the_data_independent_bound(tmp_path):
    """Each step costs n_S n = 80 queries of 2 lam^2 a; with lam = 0.01 the planner says how many steps
    fit eps = 2, and training stops exactly there, before the step that would exceed it."""
    model = tiny(lam=0.01)
    per_step = 80 * 2 * 0.01**2 * np.asarray(DEFAULT_ORDERS)  # (2 lam, 0)-DP per query: 2 lam^2 a RDP
    assert model.step_cost().worst["data_independent"] == pytest.approx(per_step)
    fits = model.step_cost().steps(2.0, 1e-5, "data_independent", "classical")
    assert 2 <= fits < 20
    budget = PrivacyBudget(epsilon=2.0, delta=1e-5, bound="data_independent")
    trainer, _ = fit(model, steps=50, callbacks=[budget], root=str(tmp_path))
    assert trainer.global_step == fits
    assert model.ledger.epsilon(1e-5, "data_independent")[0] <= 2.0
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["stop"]["discarded_steps"] == 0 and "stopped before it" in report["stop"]["reason"]
    assert report["mechanisms"][MECHANISM]["count"] == fits * 80


def test_data_dependent_budget_rolls_back_the_overshooting_step(tmp_path):
    """Under the data-dependent bound the cost is known after the step: the generator and the ledger of the
    overshooting step are discarded, so the released generator is within the budget."""
    model = tiny(lam=0.05)  # 8 teachers: no vote is confident enough to cost less than 4.7 a step
    budget = PrivacyBudget(epsilon=10.0, delta=1e-5, bound="data_dependent")
    trainer, _ = fit(model, steps=200, callbacks=[budget], root=str(tmp_path))
    assert 2 <= trainer.global_step < 200  # steps released, then the one over the budget
    assert model.ledger.epsilon(1e-5, "data_dependent")[0] <= 10.0
    assert json.loads((tmp_path / "privacy.json").read_text())["stop"]["discarded_steps"] == 1


def test_tiny_run_lowers_the_teacher_and_student_losses():
    """With little vote noise (lam = 5) the teachers learn to tell their records from generated ones and the
    student learns the teachers' labels: both losses fall from their value at the first step."""
    model = tiny(lam=5.0)
    model.log_private = True  # the teacher loss is computed on private records: logged only when asked
    losses = spy_logs(model)
    fit(model, steps=30)
    first, last = losses[0], np.mean([[l["private/loss/teachers"], l["loss/student"]] for l in losses[-5:]], axis=0)
    assert last[0] < first["private/loss/teachers"] and last[1] < first["loss/student"]


def compose_cfg(*overrides):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=["method=pategan", *overrides])


def test_config_builds_teacher_batches_and_refuses_private_data_dependent_scaling(tmp_path):
    """The CLI builds PATE-GAN's datamodule with one partition per teacher and the teacher batch of the
    config; a private method never fits min / max scaling on the private data (it is refused)."""
    path = tmp_path / "t.csv"
    rng = np.random.default_rng(0)
    rows = ["a,b,label"] + [f"{rng.random():.3f},{rng.random() * 9:.3f},{i % 2}" for i in range(300)]
    path.write_text("\n".join(rows) + "\n")
    cfg = compose_cfg("data=csv", f"data.path={path}", "data.label=label", "data.classes=[0,1]",
                      "method.n_teachers=3", "method.batch_size=20")
    with pytest.raises(Exception, match="allowed only for non-private methods"):  # DataConfigError via Hydra
        build_datamodule(cfg).setup("fit")
    cfg = compose_cfg("data=csv", f"data.path={path}", "data.label=label", "data.classes=[0,1]",
                      "data.default_range=[0,10]", "method.n_teachers=3", "method.batch_size=20")
    dm = build_datamodule(cfg)
    dm.setup("fit")
    assert not dm.allow_data_dependent_preprocessing and len(dm.partitions) == 3
    model = build_method(cfg, dm)
    assert isinstance(model, PATEGAN) and model.n_teachers == 3 and model.lam == 0.2
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (3, 20, 2)


def test_votes_real_logs_the_share_of_released_real_labels(monkeypatch):
    model = tiny(lam=1000.0)  # the vote is the teachers' majority: no noise to speak of
    n = model.batch_size
    answers = iter([torch.cat([torch.ones(TEACHERS, 4), -torch.ones(TEACHERS, n - 4)], 1)] * model.student_steps
                   + [-torch.ones(TEACHERS, n)] * model.student_steps)  # step 1: 4 of 16 real; step 2: none
    monkeypatch.setattr(model.ensemble, "predict_logits", lambda x, y: next(answers))
    logged = spy_logs(model)
    fit(model, steps=2)
    assert [entry["votes/real"] for entry in logged] == [4 / n, 0.0]
    assert not any(key.startswith("private/") for entry in logged for key in entry)  # a released quantity


def test_a_checkpoint_with_the_teacher_pause_buffer_resumes(tmp_path):
    """A checkpoint that holds `last_real_share` (the buffer of a teacher pause PATE-GAN no longer has) resumes."""
    trainer, _ = fit(tiny(), steps=1, root=tmp_path)
    path = tmp_path / "old.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=False)
    checkpoint["state_dict"]["last_real_share"] = torch.tensor(1.0)
    torch.save(checkpoint, path)
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(tiny(), datamodule=Toy(batch_size=40, n_teachers=TEACHERS), ckpt_path=path)
    assert trainer.global_step == 2  # the second step ran on the resumed state
