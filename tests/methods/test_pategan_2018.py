"""PATE-GAN's 2018 public code (dpgen.methods.pategan_2018): its label-noise formula, its targets, its critic loss
against an independent computation, a tiny run that learns, and privacy.json saying there is no guarantee."""
import math
import warnings
from statistics import NormalDist

import lightning.pytorch as pl
import pytest
import torch

from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.methods.pategan_2018 import PATEGAN2018Code, code_label_noise, noisy_targets

warnings.filterwarnings("ignore")


def test_label_noise_is_the_codes_formula_with_its_xor():
    """lamda = sqrt(2 ln(1.25 (10 ^ delta))) / epsilon with delta = 5: 10 XOR 5 = 15 (0b1010 ^ 0b0101 = 0b1111),
    so lamda = sqrt(2 ln 18.75) / epsilon = 2.4212 / epsilon, not the Gaussian mechanism's
    sqrt(2 ln(1.25 / 1e-5)) = 4.845 that the line reads as."""
    assert 0b1010 ^ 0b0101 == 15
    assert code_label_noise(1.0) == pytest.approx(math.sqrt(2 * math.log(18.75)), rel=1e-12)
    assert code_label_noise(1.0) == pytest.approx(2.42124, abs=1e-5)
    assert code_label_noise(10.0) == pytest.approx(0.242124, abs=1e-6)
    assert math.sqrt(2 * math.log(1.25 / 1e-5)) == pytest.approx(4.845, abs=1e-3)  # what it was meant to be
    with pytest.raises(ValueError, match="epsilon"):
        code_label_noise(0.0)


def test_noisy_targets_flip_at_the_gaussian_rate():
    """Record targets stay 1 with probability P(N(0, s^2) > -0.5) and generated ones become 1 with P(N > 0.5);
    at the code's eps = 1 (s = 2.4212): 0.582 and 0.418, so its critic's real / fake signal is 0.164 of a
    clean one's. Without noise the targets are exact."""
    assert noisy_targets(3, 0.0).tolist() == [1, 1, 1, 0, 0, 0]
    n, s = 200_000, code_label_noise(1.0)
    m = noisy_targets(n, s, generator=torch.Generator().manual_seed(0))
    kept, flipped = float(m[:n].mean()), float(m[n:].mean())
    p = NormalDist().cdf(-0.5 / s)  # P(N(0, s^2) > 0.5)
    assert p == pytest.approx(0.418, abs=1e-3)
    std = math.sqrt(p * (1 - p) / n)
    assert abs(kept - (1 - p)) < 5 * std and abs(flipped - p) < 5 * std


def tiny(**kw) -> PATEGAN2018Code:
    args = dict(critic_steps=2, batch_size=16, hidden=16, z_dim=4, label_noise=0.0)
    return PATEGAN2018Code((4,), 2, "table", **{**args, **kw})


def test_critic_loss_is_the_codes_wgan_gp_with_noisy_targets():
    """Without label noise: (sum D(fake) - sum D(real)) / 2n plus 10 mean((|grad_x D(mix)| - 1)^2), the gradient of
    each interpolate taken on its own (a per-sample Jacobian here, one batched autograd call in the module), the
    norm sqrt(sum(g^2 + 1e-8)) as the code has it."""
    torch.manual_seed(0)
    model = tiny()
    x, fake, y = torch.rand(5, 4), torch.rand(5, 4), torch.tensor([0, 1, 1, 0, 1])
    torch.manual_seed(1)
    loss = model.critic_loss(x, y, fake)
    torch.manual_seed(1)
    alpha = torch.rand(5, 1)
    d = model.net_d
    mixed = alpha * x + (1 - alpha) * fake
    penalty = 0.0
    for i in range(5):
        g = torch.autograd.functional.jacobian(lambda v: d(v[None], y[i:i + 1]).sum(), mixed[i])
        penalty += (math.sqrt(float((g.pow(2) + 1e-8).sum())) - 1) ** 2
    expected = (d(fake, y).sum() - d(x, y).sum()) / 10 + 10 * penalty / 5
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-5)


class TwoClusters(DPGenDataModule):
    """600 records, 4 features around 0.2 (class 0) or 0.8 (class 1), std 0.05."""

    name, kind, shape, num_classes, class_names = "two_clusters", "table", (4,), 2, ["low", "high"]

    def load(self):
        g = torch.Generator().manual_seed(0)
        y = torch.arange(600) % 2
        x = (0.2 + 0.6 * y[:, None] + 0.05 * torch.randn(600, 4, generator=g)).clamp(0, 1)
        return TensorData(x, y), TensorData(x[:50], y[:50])


def class_gap(model) -> float:
    """Mean of the generated class-1 records minus that of class-0 ones (the records': 0.6)."""
    with torch.no_grad():
        x, y = model.sample(400)
    return float(x[y == 1].mean() - x[y == 0].mean())


def test_a_tiny_run_learns_the_class_conditional_clusters():
    pl.seed_everything(0)
    model = tiny(lr=1e-3)
    before = class_gap(model)
    trainer = pl.Trainer(max_steps=300, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, datamodule=TwoClusters(batch_size=32))
    assert abs(before) < 0.15
    assert class_gap(model) > 0.45


def test_a_batch_too_small_for_its_critic_steps_is_refused():
    model = tiny()
    with pytest.raises(ValueError, match="critic_steps x module.batch_size"):
        model.training_step((torch.rand(20, 4), torch.zeros(20, dtype=torch.long)), 0)
    with pytest.raises(ValueError, match="label_noise"):
        tiny(label_noise=-1.0)


def test_only_the_codes_formula_makes_a_claim():
    """privacy.json's claimed_epsilon is the epsilon the formula was given; a label_noise given directly (the
    noise-free control's 0) claims none."""
    assert tiny(label_noise=None, code_epsilon=10.0).privacy_claim["claimed_epsilon"] == 10.0
    assert tiny(label_noise=None, code_epsilon=10.0).label_noise == code_label_noise(10.0)
    control = tiny(label_noise=0.0, code_epsilon=10.0).privacy_claim
    assert control["claimed_epsilon"] is None and control["label_noise"] == 0.0 and control["guarantee"] == "none"
