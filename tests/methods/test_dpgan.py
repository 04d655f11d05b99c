"""DP-GAN and the DP-SGD machinery it shares with DP-CGAN (dpgen.methods.dpgan)."""
import json
import warnings

import dp_accounting
import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torch import nn

from clipping import clipped_sum
from dpgen.callbacks.privacy_budget import PrivacyBudget
from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.methods.dpgan import DPGAN, MECHANISM
from dpgen.nn.generator import ConditionalImageGenerator, ConditionalTableGenerator
from dpgen.nn.mixed_table import MixedTableGenerator
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp

warnings.filterwarnings("ignore")


class Toy(DPGenDataModule):
    """400 records, 4 features: class 0 around 0.25, class 1 around 0.75 (std 0.05)."""

    name, kind, shape, num_classes, class_names = "toy", "table", (4,), 2, ["a", "b"]

    def load(self):
        g = torch.Generator().manual_seed(0)
        y = torch.arange(400) % 2
        x = (0.25 + 0.5 * y[:, None] + 0.05 * torch.randn(400, 4, generator=g)).clamp(0, 1).float()
        return TensorData(x, y), TensorData(x[:50], y[:50])


def tiny(cls, **kw):
    args = dict(z_dim=8, batch_size=32, noise_multiplier=0.3, generator={"hidden": [32]}, discriminator={"hidden": [32]})
    args.update(kw)
    return cls((4,), 2, "table", **args)


def fit(model, steps, callbacks=(), batch_size=32, root=None, accelerator="auto"):
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=list(callbacks), default_root_dir=root,
                         accelerator=accelerator)
    trainer.fit(model, datamodule=Toy(batch_size=batch_size))
    return trainer


def distance_to_data(model):
    """Mean |class mean of samples - class centre| over features and the two classes."""
    torch.manual_seed(1)
    x, y = model.sample(400)
    return sum((x[y == c].mean(0) - (0.25 + 0.5 * c)).abs().mean().item() for c in (0, 1)) / 2


def test_tiny_run_moves_samples_toward_the_data():
    torch.manual_seed(0)
    model = tiny(DPGAN, optimizer_g={"name": "rmsprop", "lr": 1e-2}, optimizer_d={"name": "rmsprop", "lr": 1e-2})
    before = distance_to_data(model)
    fit(model, 100)
    assert distance_to_data(model) < 0.8 * before  # measured: 0.244 -> 0.171


def test_epsilon_after_n_steps_equals_dp_accounting():
    model = tiny(DPGAN, noise_multiplier=1.0)
    fit(model, 3)
    # 3 generator steps x 5 critic steps = 15 Poisson-sampled Gaussian steps, q = 32 / 400, sigma = 1
    assert model.ledger.summary(1e-5)["mechanisms"][MECHANISM]["count"] == 15
    accountant = dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))
    accountant.compose(dp_accounting.PoissonSampledDpEvent(32 / 400, dp_accounting.GaussianDpEvent(1.0)), 15)
    eps, _ = model.ledger.epsilon(1e-5, "data_independent", "improved")
    assert eps == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-6)


def rdp_fitting_steps():
    """Independent count: generator steps (5 DP-SGD events each, q = 32 / 400, sigma = 2) within eps = 3 at
    delta = 1e-5, by dp_accounting's RDP accountant and the classical conversion."""
    accountant_eps = []
    for k in range(1, 40):
        acc = dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))
        acc.compose(dp_accounting.PoissonSampledDpEvent(32 / 400, dp_accounting.GaussianDpEvent(2.0)), 5 * k)
        accountant_eps.append(eps_from_rdp(acc.rdp, DEFAULT_ORDERS, 1e-5, "classical")[0])
    return sum(e <= 3.0 for e in accountant_eps)


def test_budget_stops_before_exceeding(tmp_path):
    model = tiny(DPGAN, noise_multiplier=2.0)
    fitting = rdp_fitting_steps()
    assert 1 < fitting < 39
    trainer = fit(model, 100, [PrivacyBudget(3.0, 1e-5)], root=tmp_path)  # privacy.json goes there
    assert trainer.global_step == fitting
    assert model.ledger.epsilon(1e-5)[0] <= 3.0
    assert model.ledger.stop["discarded_steps"] == 0  # stopped before, not rolled back
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["mechanisms"][MECHANISM]["count"] == 5 * fitting
    # the default privacy.bound=data_dependent is reported as what DP-SGD has: the data-independent bound
    assert report["governing_bound"] == "data_independent" and report["requested_bound"] == "data_dependent"
    assert list(report["bounds"]) == ["data_independent"] and "DATA-DEPENDENT" not in json.dumps(report)


def test_pld_budget_rolls_back_the_step_that_exceeds_and_buys_more_steps(tmp_path):
    # the same run under conversion=pld: checked after each step; independent count with dp_accounting's PLD at
    # a finer discretization than ours (ours is pessimistic, so it may stop one step earlier, never later)
    def pld_eps(k, interval):
        acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=interval)
        acc.compose(dp_accounting.PoissonSampledDpEvent(32 / 400, dp_accounting.GaussianDpEvent(2.0)), 5 * k)
        return acc.get_epsilon(1e-5)

    fitting = max(k for k in range(1, 60) if pld_eps(k, 1e-3) <= 3.0)  # what our ledger computes
    assert pld_eps(fitting + 1, 1e-4) > 3.0 - 0.05  # the fine value agrees that the next step is (about) over
    model = tiny(DPGAN, noise_multiplier=2.0)
    trainer = fit(model, 100, [PrivacyBudget(3.0, 1e-5, conversion="pld")], root=tmp_path)
    assert trainer.global_step == fitting  # a fixed cost: planned once, stopped before the step that would exceed
    assert model.ledger.stop["discarded_steps"] == 0
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["conversion"] == "pld" and report["mechanisms"][MECHANISM]["count"] == 5 * fitting
    assert report["epsilon"] == pytest.approx(pld_eps(fitting, 1e-3)) and report["epsilon"] <= 3.0
    assert fitting > rdp_fitting_steps()  # the PLD bound is tighter than RDP: more steps for the same budget


def test_generator_step_leaves_no_gradient_on_the_discriminator():
    model = tiny(DPGAN)
    fit(model, 1)
    for p in model.net_d.parameters():
        p.grad, p.grad_sample = None, None  # what the last critic step left
    g_before = [p.detach().clone() for p in model.net_g.parameters()]
    model.generator_step()
    assert all(p.grad is None and getattr(p, "grad_sample", None) is None for p in model.net_d.parameters())
    assert all(p.requires_grad for p in model.net_d.parameters())  # unfrozen for the next critic step
    assert any(not torch.equal(a, b) for a, b in zip(g_before, model.net_g.parameters()))


def test_empty_poisson_batch_is_a_noise_only_step():
    model = tiny(DPGAN, weight_clip=None)
    # CPU: the step below is called by hand on CPU tensors, and Lightning hands the module back on the CPU after
    # fit while the DP-SGD noise generator stays on the device it trained on
    fit(model, 1, accelerator="cpu")
    before = [p.detach().clone() for p in model.net_d.parameters()]
    loss = model.critic_step(torch.empty(0, 4), torch.empty(0, dtype=torch.long))
    after = list(model.net_d.parameters())
    assert torch.isfinite(loss) and all(torch.isfinite(p).all() for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # noise and the public fake term still apply


def per_sample_update(model, x, y, fake, fake_y, clip_fake: bool) -> list[torch.Tensor]:
    """The critic's expected gradient, computed sample by sample on a plain copy of D (WGAN: -D(record),
    +D(generated)): each record's gradient clipped to C, each generated sample's clipped too or not, summed and
    divided by the expected batch size."""
    net = model.net_d._module
    terms = [(-net(xi[None], yi[None]).sum(), True) for xi, yi in zip(x, y)]
    terms += [(net(f[None], fy[None]).sum(), clip_fake) for f, fy in zip(fake, fake_y)]
    return [t / model.batch_size for t in clipped_sum(list(net.parameters()), terms, model.max_grad_norm)]


@pytest.mark.parametrize("fake_term", ["clipped", "public"])
def test_the_critic_step_clips_what_fake_term_says_and_nothing_else(fake_term):
    torch.manual_seed(0)
    model = tiny(DPGAN, weight_clip=None, fake_term=fake_term, max_grad_norm=0.05,
                 optimizer_d={"name": "sgd", "lr": 1.0})
    fit(model, 1, accelerator="cpu")
    model.dp_optimizer.noise_multiplier = 0.0  # the update itself is under test, not the noise
    x, y = Toy().load()[0][:20]
    fake, fake_y = model.generated(model.batch_size)
    fake, fake_y = fake.detach(), fake_y.detach()
    model.generated = lambda n: (fake, fake_y)
    expected = per_sample_update(model, x, y, fake, fake_y, clip_fake=fake_term == "clipped")
    before = [p.detach().clone() for p in model.net_d.parameters()]
    model.critic_step(x, y)
    moved = [b - p.detach() for b, p in zip(before, model.net_d.parameters())]  # SGD, lr 1: the update itself
    for m, e in zip(moved, expected):
        assert torch.allclose(m, e, atol=1e-6), (m - e).abs().max()
    # with C this small every clipped term has norm C: clipping the fake term too shrinks the update's fake part
    fake_part = per_sample_update(model, x[:0], y[:0], fake, fake_y, clip_fake=False)
    assert (sum(f.norm() ** 2 for f in fake_part) ** 0.5).item() > 10 * 0.05 * len(fake) / model.batch_size


def test_the_fake_term_does_not_change_the_accounting():
    costs = []
    for fake_term in ("public", "clipped"):
        model = tiny(DPGAN, fake_term=fake_term)
        fit(model, 1, accelerator="cpu")
        costs.append(model.step_cost().epsilon(1e-5, "data_independent", "classical", n=100))
    assert costs[0] == costs[1] > 0
    with pytest.raises(ValueError, match="fake_term"):
        tiny(DPGAN, fake_term="none")


def test_discriminator_weights_clipped_and_batchnorm_replaced():
    model = tiny(DPGAN, discriminator={"hidden": [32], "batch_norm": True})
    kinds = {type(m) for m in model.net_d.modules()}
    assert nn.GroupNorm in kinds and not kinds & {nn.BatchNorm1d, nn.BatchNorm2d}
    fit(model, 2)
    assert max(p.abs().max().item() for p in model.net_d.parameters()) <= 0.1 + 1e-7


def test_poisson_batches_have_the_sampling_rate():
    model = tiny(DPGAN)
    fit(model, 1)
    sizes = np.array([len(model.private_batch()[1]) for _ in range(300)])
    # Binomial(400, 0.08): mean 32, std 5.4; the mean of 300 batches is within 1.5 of 32 with prob > 0.999
    assert abs(sizes.mean() - 32) < 1.5 and sizes.std() > 2


def test_conv_nets_are_gpate_nets_for_images_and_pategan_mlps_for_tables():
    spec = dict(generator={"arch": "conv", "fc_dim": 16, "start_channels": 4, "deconv_channels": [4]},
                discriminator={"arch": "conv", "channels": [4, 8], "hidden": 8})
    image = DPGAN((1, 28, 28), 10, "image", **spec)
    assert isinstance(image.net_g, ConditionalImageGenerator) and image.net_g.fc1[0].out_features == 16
    convs = [m for m in image.net_d.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [4, 8]
    table = DPGAN((6,), 2, "table", **spec)  # the image sizes do not apply: PATE-GAN's d, d/2, d
    assert isinstance(table.net_g, ConditionalTableGenerator)
    hidden = [m.out_features for m in table.net_d.modules() if isinstance(m, nn.Linear)]
    assert hidden == [6, 3, 6, 1]


def test_a_table_generator_option_draws_one_category_per_one_hot_block():
    """generator.table: DP-MERF's tabular generator (continuous columns first, then a one-hot block per categorical
    column): exact one-hot blocks when sampling, the relaxed draw while training."""
    spec = dict(generator={"arch": "conv", "table": {"categorical": {"c": ["a", "b", "c"]}, "hidden": [16]}},
                discriminator={"arch": "conv"})
    table = DPGAN((5,), 2, "table", **spec)
    assert isinstance(table.net_g, MixedTableGenerator) and table.net_g.one_hot == (3,)
    rows, _ = table.sample(100, torch.tensor([0, 1] * 50))
    assert rows.shape == (100, 5) and ((rows[:, :2] >= 0) & (rows[:, :2] <= 1)).all()
    block = rows[:, 2:]
    assert ((block == 0) | (block == 1)).all() and (block.sum(1) == 1).all()
    table.net_g.train()
    soft = table.net_g(torch.randn(100, table.z_dim), torch.tensor([0, 1] * 50))[:, 2:]
    assert torch.allclose(soft.sum(1), torch.ones(100)) and ((soft > 0) & (soft < 1)).any()
