"""DP-MERF (dpgen.methods.dpmerf): one release that reads each record once, a ledger that reports the budget,
steps that cost nothing, and a generator that learns from the release."""
import json
import math
import warnings

import lightning.pytorch as pl
import pytest
import torch

from dpgen.aggregation.mean_embedding import MECHANISM
from dpgen.callbacks import PrivacyBudget
from dpgen.callbacks.checkpoint_io import CheckpointError
from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.methods.dpmerf import DPMERF

warnings.filterwarnings("ignore")
SHAPE = (1, 8, 8)


def two_classes(n: int = 64, shape=SHAPE):
    """Class 0: a bright left half, class 1: a bright right half, plus noise (std 0.1)."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % 2
    x = 0.1 * torch.randn(n, *shape, generator=g)
    half = shape[-1] // 2
    x[y == 0, :, :, :half] += 0.8
    x[y == 1, :, :, half:] += 0.8
    return x.clamp(0, 1), y


class Images(DPGenDataModule):
    name, kind, shape, num_classes, class_names = "img", "image", SHAPE, 2, ["a", "b"]

    def load(self):
        x, y = two_classes(shape=self.shape)
        return TensorData(x, y), TensorData(x[:8], y[:8])


class CountingData(TensorData):
    """Counts how often each record is read."""

    def __init__(self, x, y):
        super().__init__(x, y)
        self.reads = torch.zeros(len(y), dtype=torch.long)

    def __getitem__(self, idx):
        self.reads[torch.arange(len(self))[idx]] += 1
        return super().__getitem__(idx)


def tiny(shape=SHAPE, **kw):
    args = dict(epsilon=1.0, delta=1e-5, batch_size=32, n_features=200, bandwidth=2.0, z_dim=4, chunk_size=10,
                generator={"kind": "fc", "fc": {"hidden": [32, 32]}})
    args.update(kw)
    return DPMERF(shape, 2, "image", **args)


def fit(model, steps, callbacks=(), root=None, datamodule=Images, ckpt=None):
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=list(callbacks), default_root_dir=root,
                         accelerator="cpu")
    trainer.fit(model, datamodule=datamodule(batch_size=8), ckpt_path=ckpt)
    return trainer


@pytest.mark.parametrize("conversion", ["gdp", "classical"])
def test_the_release_reads_each_record_once_and_is_the_ledgers_only_entry(conversion):
    model = tiny(conversion=conversion)
    data = CountingData(*two_classes(45))
    model.release_embedding(data)
    assert torch.equal(data.reads, torch.ones(45, dtype=torch.long))
    summary = model.ledger.summary(1e-5)["mechanisms"]
    assert list(summary) == [MECHANISM] and summary[MECHANISM]["count"] == 1
    eps = model.ledger.epsilon(1e-5, "data_dependent", conversion)[0]  # data_dependent: an alias here
    assert 1.0 * (1 - 1e-6) <= eps <= 1.0
    # the step cost PrivacyBudget checks: the upfront release, then steps that add nothing
    cost = model.step_cost()
    assert cost.epsilon(1e-5, "data_dependent", conversion, n=1000) == pytest.approx(eps, rel=1e-9)
    assert model.counts.sum().item() == pytest.approx(45, abs=60)  # noisy counts (std sigma / a ~ 19 each)


@pytest.mark.parametrize("conversion", ["gdp", "classical"])
def test_budgeted_run_takes_every_step_and_reports_the_budget(tmp_path, conversion):
    model = tiny(conversion=conversion)
    trainer = fit(model, 5, [PrivacyBudget(1.0, 1e-5, conversion=conversion)], root=tmp_path)
    assert trainer.global_step == 5 and model.ledger.stop["discarded_steps"] == 0
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert 1.0 * (1 - 1e-6) <= report["epsilon"] <= 1.0 and report["governing_bound"] == "data_independent"
    entry = report["mechanisms"][MECHANISM]
    assert entry["count"] == 1 and "post-processing" in entry["params"][0]["note"]
    assert entry["params"][0]["sigma"] == pytest.approx(model.sigma)


def test_a_resumed_fit_does_not_release_again():
    model = tiny()
    fit(model, 1)
    target = model.target.clone()
    fit(model, 1)  # the ledger holds the release: on_fit_start keeps it
    assert model.ledger.summary(1e-5)["mechanisms"][MECHANISM]["count"] == 1 and torch.equal(model.target, target)


def class_mean_distance(model) -> float:
    """Mean |class mean of samples - class mean of the data| over pixels and the two classes."""
    torch.manual_seed(1)
    x, y = model.sample(200)
    real_x, real_y = two_classes()
    return sum((x[y == c].mean(0) - real_x[real_y == c].mean(0)).abs().mean().item() for c in (0, 1)) / 2


def test_a_noise_free_run_learns_the_class_means():
    torch.manual_seed(0)
    model = tiny(lr=1e-2)
    model.sigma = 1e-9  # learning, not privacy, is under test: the release is (almost) the exact embedding
    before = class_mean_distance(model)
    fit(model, 150)
    after = class_mean_distance(model)
    assert after < 0.2 * before, (before, after)  # measured over 3 seeds: 0.38 -> 0.017..0.019


class LearningRates(pl.Callback):
    """The rate each step took."""

    def __init__(self):
        self.rates = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.rates.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_cosine_decay_takes_each_step_at_its_cosine_rate_and_still_learns():
    torch.manual_seed(0)
    model = tiny(lr=1e-2, lr_decay="cosine")
    model.sigma = 1e-9
    before, seen = class_mean_distance(model), LearningRates()
    fit(model, 150, callbacks=[seen])
    assert seen.rates == pytest.approx([1e-2 * (1 + math.cos(math.pi * t / 150)) / 2 for t in range(150)], abs=1e-12)
    assert class_mean_distance(model) < 0.2 * before
    with pytest.raises(ValueError, match="lr_decay must be one of"):
        tiny(lr_decay="linear")


def test_a_run_resumed_from_its_checkpoint_continues_the_cosine_schedule(tmp_path):
    def run(ckpt=None, stop_at=None):
        seen = LearningRates()
        trainer = fit(tiny(lr_decay="cosine"), 8, [seen] + ([StopAt(stop_at)] if stop_at else []), tmp_path, ckpt=ckpt)
        return trainer, seen.rates

    first, before = run(stop_at=3)  # cut off after its 3rd step (of 8)
    ckpt = tmp_path / "cut.ckpt"
    first.save_checkpoint(ckpt)
    _, after = run(ckpt)
    cosine = [1e-2 * (1 + math.cos(math.pi * t / 8)) / 2 for t in range(8)]
    assert before[:3] + after == pytest.approx(cosine, abs=1e-12) and len(after) == 5


class StopAt(pl.Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        trainer.should_stop = trainer.global_step >= self.step


def test_the_conv_generator_is_one_config_switch_away_and_trains():
    model = tiny(generator={"kind": "conv", "fc": {"hidden": [32]},
                            "conv": {"fc_dim": 16, "start_channels": 8, "deconv_channels": [8]}})
    assert any(isinstance(m, torch.nn.ConvTranspose2d) for m in model.net_g.modules())
    before = [p.detach().clone() for p in model.net_g.parameters()]
    fit(model, 2)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.net_g.parameters()))
    x, _ = model.sample(4)
    assert x.shape == (4, *SHAPE) and 0 <= x.min() and x.max() <= 1
    with pytest.raises(ValueError, match="conv, fc or table"):
        tiny(generator={"kind": "resnet"})
    with pytest.raises(ValueError, match="does not fit image data"):
        tiny(generator={"kind": "table"})


def test_released_labels_follow_the_noisy_class_counts():
    model = tiny(labels="released")
    fit(model, 1)
    assert torch.allclose(model.class_probs, model.counts / model.counts.sum())
    assert model.release()["class_probs"] == pytest.approx(model.class_probs.tolist())
    assert set(model.sample_labels(50).tolist()) <= {0, 1}


def test_unknown_data_kinds_and_pld_are_refused():  # tables: tests/methods/test_dpmerf_tables.py
    with pytest.raises(ValueError, match="image and table data, not 'audio'"):
        DPMERF((4,), 2, "audio", epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="gdp"):
        tiny(conversion="pld")


def test_a_feature_map_list_keeps_the_sensitivity_and_its_release_is_the_blocks_sums():
    """method.module.features: the release is the weighted concatenation's class sums (checked against each block's
    own rows), with the same sensitivity and sigma as the default's; the checkpoint names the map."""
    spec = [{"kind": "rff", "weight": 1}, {"kind": "ntk", "width": 6, "weight": 2},
            {"kind": "conv", "channels": 4, "kernel": 3, "stride": 2, "pool": 2, "weight": 1}]
    model, plain = tiny(features=spec), tiny()
    assert model.sensitivity == plain.sensitivity and model.sigma == plain.sigma
    model.sigma = 1e-12  # the exact sums, up to noise far below the tolerance
    data = CountingData(*two_classes(30))
    model.release_embedding(data)
    assert torch.equal(data.reads, torch.ones(30, dtype=torch.long))
    x, y = two_classes(30)
    rows = torch.cat([math.sqrt(w) * block(x) for block, w in zip(model.features.blocks, (0.25, 0.5, 0.25))], 1)
    expected = torch.stack([rows[y == c].mean(0) for c in range(2)])
    assert torch.allclose(model.target, expected, atol=1e-5)
    params = model.ledger.summary(1e-5)["mechanisms"][MECHANISM]
    assert json.dumps(params) and model.feature_identity()["blocks"][1]["kind"] == "ntk"
    fit(model, 2)
    checkpoint = {}
    model.on_save_checkpoint(checkpoint)
    tiny(features=spec).on_load_checkpoint(checkpoint)
    with pytest.raises(CheckpointError, match="method.module.features"):
        plain.on_load_checkpoint(checkpoint)
