"""G-PATE (dpgen.methods.gpate) on a tiny table: accounting per step, the Laplace class ratio, and the rule that the generator learns
from private data only through DPGradAgg."""
import json
import warnings

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from dpgen.aggregation import dpgradagg
from dpgen.callbacks.checkpoint_io import AtomicCheckpointIO
from dpgen.callbacks.privacy_budget import PrivacyBudget
from dpgen.callbacks.random_state import RandomState
from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.methods import gpate
from dpgen.methods.gpate import CLASS_RATIO, GPATE
from dpgen.nn.generator import label_pool
from dpgen.privacy.laplace import rdp_laplace

warnings.filterwarnings("ignore")

TEACHERS, BATCH, FEATURES = 8, 8, 4


class Toy(DPGenDataModule):
    """400 records, 4 features: 300 of class 0 around 0.25, 100 of class 1 around 0.75 (std 0.05).
    `shift` moves every record (a different private data set of the same size)."""

    name, kind, shape, num_classes, class_names = "toy", "table", (FEATURES,), 2, ["a", "b"]

    def __init__(self, shift: float = 0.0, **kw):
        super().__init__(**kw)
        self.shift = shift

    def load(self):
        g = torch.Generator().manual_seed(0)
        y = (torch.arange(400) % 4 == 0).long()
        x = (0.25 + self.shift + 0.5 * y[:, None] + 0.05 * torch.randn(400, FEATURES, generator=g)).clamp(0, 1)
        return TensorData(x.float(), y), TensorData(x[:50].float(), y[:50])


def tiny(**kw):
    agg = dict(clip=1e-3, bins=10, proj_dim=2, sigma1=1e-3, sigma2=1e-3)
    agg.update(kw.pop("aggregator", {}))
    args = dict(n_teachers=TEACHERS, z_dim=8, lr=1e-2, aggregator=agg, teachers=dict(hidden=16, chunk_size=5),
                generator=dict(hidden=[16]))
    args.update(kw)
    return GPATE((FEATURES,), 2, "table", **args)


def fit(model, steps, callbacks=(), root=None, ckpt_path=None, shift=0.0):
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=list(callbacks), default_root_dir=root)
    trainer.fit(model, datamodule=Toy(shift, batch_size=BATCH, n_teachers=TEACHERS), ckpt_path=ckpt_path)
    return trainer


def mechanisms(model):
    return model.ledger.summary(1e-5)["mechanisms"]


@pytest.mark.parametrize("proj_dim, per_sample", [(2, 2), (None, FEATURES)])
def test_each_step_records_b_times_k_queries(tmp_path, proj_dim, per_sample):
    # b = min(batch 8, partition 400 / 8 = 50) = 8 fake samples, k = 2 projected coordinates (or all 4
    # coordinates without projection): 8 * k Confident-GNMax queries per step, 3 steps
    model = tiny(aggregator={"proj_dim": proj_dim, "sigma1": 50.0, "sigma2": 20.0})
    fit(model, 3, [PrivacyBudget(1e6, 1e-5)], root=tmp_path)
    queries = 3 * BATCH * per_sample
    assert mechanisms(model)["confident_gnmax"]["count"] == queries
    assert model.step_cost().worst["data_independent"] == pytest.approx(
        BATCH * per_sample * (model.orders / (2 * 50.0**2) + model.orders / 20.0**2))  # appendix D
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["mechanisms"]["confident_gnmax"]["count"] == queries and CLASS_RATIO not in report["mechanisms"]


def test_class_ratio_release_noise_and_rdp_by_hand():
    # tests fix the secret seed to 12345 (conftest), so the Laplace noise is default_rng(12345).laplace(0, 1/eps):
    # adding or removing one record moves one count by one (L1 sensitivity 1), so eps = 0.5 needs scale 2
    model = tiny(class_ratio_epsilon=0.5)
    labels = torch.tensor([0] * 30 + [1] * 10)
    model.release_class_ratio(labels)
    noisy = np.array([30.0, 10.0]) + np.random.default_rng(12345).laplace(0.0, 2.0, size=2)
    np.testing.assert_allclose(model.class_probs.numpy(), noisy / noisy.sum(), rtol=1e-6)
    entry = mechanisms(model)[CLASS_RATIO]
    assert entry["count"] == 1 and entry["params"][0]["scale"] == 2.0 and entry["params"][0]["sensitivity"] == 1.0
    np.testing.assert_allclose(model.ledger.rdp("data_independent"), rdp_laplace(0.5, model.orders), rtol=0)
    np.testing.assert_allclose(model.ledger.rdp("data_dependent"), rdp_laplace(0.5, model.orders), rtol=0)


def test_class_ratio_counts_are_floored_at_one():
    model = tiny(class_ratio_epsilon=1e-3)  # noise scale 1000 on counts 2 and 1: a negative count is likely
    torch.manual_seed(0)
    model.release_class_ratio(torch.tensor([0, 0, 1]))
    assert torch.all(model.class_probs > 0) and model.class_probs.sum().item() == pytest.approx(1.0)


def test_class_ratio_released_once_labels_follow_it_and_resume_does_not_release_again(tmp_path):
    model = tiny(class_ratio_epsilon=1.0, aggregator={"sigma1": 50.0, "sigma2": 20.0})
    fit(model, 2, [PrivacyBudget(1e6, 1e-5)], root=tmp_path)
    # counts 300 and 100 plus Lap(1) noise: the ratio is within 0.01 of 3:1 unless |noise| > 3 (prob 5%;
    # the seed is fixed here)
    probs = model.class_probs
    assert probs[1].item() == pytest.approx(0.25, abs=0.01)
    assert mechanisms(model)[CLASS_RATIO]["count"] == 1
    assert mechanisms(model)["confident_gnmax"]["count"] == 2 * BATCH * 2
    torch.manual_seed(0)
    _, y = model.sample(4000)
    assert (y == 1).float().mean().item() == pytest.approx(probs[1].item(), abs=0.025)  # 3.5 binomial std
    assert model.release()["class_probs"] == pytest.approx(probs.tolist())
    ckpt = tmp_path / "two.ckpt"
    model.trainer.save_checkpoint(ckpt)

    resumed = tiny(class_ratio_epsilon=1.0, aggregator={"sigma1": 50.0, "sigma2": 20.0})
    fit(resumed, 4, [PrivacyBudget(1e6, 1e-5)], root=tmp_path, ckpt_path=ckpt)
    assert mechanisms(resumed)[CLASS_RATIO]["count"] == 1  # the ledger already had it: not released again
    assert mechanisms(resumed)["confident_gnmax"]["count"] == 4 * BATCH * 2
    assert torch.equal(resumed.class_probs, probs)


def test_class_ratio_and_public_class_probs_exclude_each_other():
    with pytest.raises(ValueError, match="not both"):
        tiny(class_ratio_epsilon=0.01, class_probs=[0.5, 0.5])


@pytest.mark.parametrize("label_matched_fakes", [False, True])
def test_generator_learns_only_through_dpgradagg(monkeypatch, label_matched_fakes):
    """The generator sees private data only through DPGradAgg. Run A trains on one data set and records every DPGradAgg output; run B trains on
    another data set (all records shifted) with the same seeds, and its DPGradAgg outputs are replaced by
    A's. If the generator received anything else from the private data, B's generator would differ from A's;
    it is bit-identical. Control: without the replay, B's generator differs."""
    real = dpgradagg.aggregate
    outputs = []

    def record(*args, **kw):
        outputs.append(real(*args, **kw))
        return outputs[-1]

    def run(shift, agg):
        monkeypatch.setattr(gpate, "aggregate", agg)
        torch.manual_seed(0)
        model = tiny(label_matched_fakes=label_matched_fakes)
        fit(model, 4, shift=shift)
        return {k: v.clone() for k, v in model.net_g.state_dict().items()}

    a = run(0.0, record)
    replay = iter(outputs)
    b = run(0.2, lambda *args, **kw: (real(*args, **kw), next(replay))[1])
    control = run(0.2, real)
    assert len(outputs) == 4
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], control[k]) for k in a)


def test_the_label_pool_is_the_generator_at_every_sample_and_class():
    torch.manual_seed(0)
    model = tiny(label_matched_fakes=True)
    model.net_g.eval()  # per-sample outputs do not depend on the batch
    z = model.latent(3)
    pool = label_pool(model.net_g, z, 2)
    assert pool.shape == (3, 2, FEATURES)
    for j in range(3):
        for c in range(2):
            torch.testing.assert_close(pool[j, c], model.net_g(z[j:j + 1], torch.tensor([c]))[0])


def test_nothing_answered_leaves_the_generator_unchanged_and_still_charges_the_checks(monkeypatch):
    # every threshold check refused: the private gradient is 0, the target equals G(z), the loss and its
    # gradient are 0, and Adam from zero moments moves nothing; each query still pays its threshold check
    def refuse_all(votes, n_teachers, p, generator=None):
        return tuple(torch.zeros(len(votes), dtype=dtype, device=votes.device) for dtype in (torch.bool, torch.long))

    monkeypatch.setattr(dpgradagg, "confident_gnmax", refuse_all)
    model = tiny(aggregator={"sigma1": 50.0})
    before = {k: v.clone() for k, v in model.net_g.named_parameters()}
    fit(model, 3)
    assert all(torch.equal(before[k], v) for k, v in model.net_g.named_parameters())
    # 3 steps * 8 samples * 2 coordinates = 48 checks, each a/(2 * 50^2) at order a, no GNMax
    np.testing.assert_allclose(model.ledger.rdp("data_independent"), 48 * model.orders / (2 * 50.0**2), rtol=1e-12)


def distance_to_data(model):
    """Mean |class mean of samples - class centre| over features and the two classes."""
    torch.manual_seed(1)
    x, y = model.sample(400)
    return sum((x[y == c].mean(0) - (0.25 + 0.5 * c)).abs().mean().item() for c in (0, 1)) / 2


def test_almost_noiseless_run_moves_samples_toward_the_data():
    torch.manual_seed(0)
    model = tiny()  # sigma1 = sigma2 = 1e-3: the aggregate is the teachers' plurality bin
    before = distance_to_data(model)
    fit(model, 150)
    assert distance_to_data(model) < 0.7 * before  # measured: 0.253 -> 0.125 (seeds 0-3: 0.09-0.15)


def test_image_options_are_ignored_for_tables(caplog):
    # `python train.py data=kaggle_credit` with the CPU default's smooth / pool: they have no meaning for a table
    with caplog.at_level("INFO", logger="dpgen.methods.gpate"):
        model = tiny(aggregator={"smooth": 3}, teachers=dict(hidden=16, chunk_size=5, pool=2))
    assert model.agg.smooth is None and model.ensemble.pool == 1 and "ignored" in caplog.text


class ToyImages(Toy):
    """The toy's 400 records as 1 x 8 x 8 images: class 0 dark, class 1 bright (public, made here)."""

    kind, shape = "image", (1, 8, 8)

    def load(self):
        train, test = super().load()
        return tuple(TensorData(d.x[:, :1].repeat(1, 64).view(-1, 1, 8, 8), d.y) for d in (train, test))


def test_pooled_teachers_and_smooth_directions_keep_b_times_k_queries_and_move_the_generator():
    # options beyond the paper (teachers.pool, aggregator.smooth) change neither the queries nor what they cost
    torch.manual_seed(0)
    model = GPATE((1, 8, 8), 2, "image", n_teachers=TEACHERS, z_dim=8, lr=1e-2,
                  aggregator=dict(clip=1e-3, bins=10, proj_dim=2, sigma1=50.0, sigma2=20.0, smooth=2),
                  teachers=dict(channels=[4, 4], hidden=16, chunk_size=5, pool=2),
                  generator=dict(fc_dim=16, start_channels=4))
    assert model.ensemble.conv_shape == (1, 4, 4)
    before = {k: v.clone() for k, v in model.net_g.named_parameters()}
    trainer = pl.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, datamodule=ToyImages(batch_size=BATCH, n_teachers=TEACHERS))
    assert mechanisms(model)["confident_gnmax"]["count"] == 3 * BATCH * 2
    assert model.step_cost().worst["data_independent"] == pytest.approx(
        BATCH * 2 * (model.orders / (2 * 50.0**2) + model.orders / 20.0**2))
    assert any(not torch.equal(before[k], v) for k, v in model.net_g.named_parameters())


def test_resumed_run_ends_with_the_teachers_generator_and_ledger_of_an_uninterrupted_one(tmp_path, monkeypatch):
    # The secret noise is drawn afresh on every start (aggregation/noise.py); here it is keyed to the step so
    # that both runs draw the same noise and any difference comes from what the checkpoint failed to carry.
    step = GPATE.training_step

    def keyed_noise(self, batch, batch_idx):
        self.noise = torch.Generator().manual_seed(1000 + self.global_step)
        return step(self, batch, batch_idx)

    monkeypatch.setattr(GPATE, "training_step", keyed_noise)
    batch = 400 // TEACHERS  # the whole partition: one batch per epoch, as G-PATE's 4000-teacher cells

    def run(steps, root, ckpt_path=None):
        torch.manual_seed(0)  # what train.py's seed_everything does on every start
        model = tiny(aggregator={"sigma1": 5.0, "sigma2": 2.0, "threshold": 0.3})
        trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=root, plugins=[AtomicCheckpointIO()],
                             callbacks=[PrivacyBudget(1e6, 1e-5), RandomState()])
        trainer.fit(model, datamodule=Toy(batch_size=batch, n_teachers=TEACHERS), ckpt_path=ckpt_path)
        return model, trainer

    whole, _ = run(6, tmp_path / "whole")
    first, trainer = run(3, tmp_path / "first")
    trainer.save_checkpoint(tmp_path / "first" / "last.ckpt")
    resumed, _ = run(6, tmp_path / "resumed", ckpt_path=tmp_path / "first" / "last.ckpt")
    assert mechanisms(resumed)["confident_gnmax"]["count"] == 6 * batch * 2
    assert resumed.ledger.state_dict() == whole.ledger.state_dict()
    for name, value in whole.state_dict().items():  # teachers, their Adam moments and step, the generator
        assert torch.equal(resumed.state_dict()[name], value), name
    assert not torch.equal(first.ensemble.params.fc_weight, whole.ensemble.params.fc_weight)
