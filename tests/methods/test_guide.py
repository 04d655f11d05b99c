"""The guide (methods/guide.py): DP-SGD trains it, it filters a generator's samples, and method=dpmerf composes it
with the release within the budget."""
import io
import json
import warnings

import pytest
import torch
from torch import nn

from dpgen.callbacks import PrivacyBudget
from dpgen.methods.guide import GuidedGenerator, guide_cnn, match_shares, quotas, relabel, train_dpsgd
from dpgen.privacy.two_stage import DPSGD, RELEASE, dpsgd_steps

import test_dpmerf
from dpgen.methods.dpmerf import DPMERF

SHAPE = (1, 16, 16)  # the guide's CNN needs 16 x 16 pixels or more


def two_classes(n: int = 64):
    return test_dpmerf.two_classes(n, SHAPE)


class Images(test_dpmerf.Images):
    shape = SHAPE


def tiny(**kw):
    return test_dpmerf.tiny(SHAPE, **kw)


def fit(model, steps, callbacks=(), root=None):
    return test_dpmerf.fit(model, steps, callbacks, root, datamodule=Images)

warnings.filterwarnings("ignore")


def test_dpsgd_trains_the_guide_to_separate_two_classes():
    x, y = two_classes(256)
    torch.manual_seed(0)  # an initialisation that does not separate the classes yet
    net = guide_cnn(SHAPE, 2)
    assert (net(x).argmax(1) == y).float().mean().item() < 0.9
    # the batches and the noise come from the OS's entropy; the margin makes the outcome certain in practice
    train_dpsgd(net, x, y, steps=60, batch_size=64, lr=2.0, momentum=0.9, clip=0.1, noise_multiplier=0.5)
    assert (net(x).argmax(1) == y).float().mean().item() >= 0.95
    assert not net._forward_hooks and not any(m._forward_hooks for m in net.modules())  # Opacus' hooks are gone
    # nothing of the private batches stays on the parameters: no per-record gradients (grad_sample), no clipped sum
    # without noise (summed_grad), no gradient; so a pickled guide (generator.pt's labeller) holds its weights alone
    assert all(p.grad is None and not vars(p) for p in net.parameters())
    buffer = io.BytesIO()
    torch.save(net, buffer)
    buffer.seek(0)
    assert all(not vars(p) for p in torch.load(buffer, weights_only=False).parameters())


def test_dpsgd_refuses_a_net_that_mixes_records():
    net = nn.Sequential(nn.Flatten(), nn.Linear(256, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    x, y = two_classes(16)
    with pytest.raises(Exception, match="BatchNorm"):
        train_dpsgd(net, x, y, steps=1, batch_size=8, lr=0.1, momentum=0.0, clip=1.0, noise_multiplier=1.0)


def test_steps_are_epochs_over_the_sampling_rate():
    assert dpsgd_steps(8, 512 / 54_000) == 844 and dpsgd_steps(1, 0.5) == 2 and dpsgd_steps(0.01, 0.5) == 1


class Alternating(nn.Module):
    """A generator whose sample is z's first coordinate broadcast: the guide below reads it as class (z > 0)."""

    def forward(self, z, y):
        return z[:, :1, None, None].expand(-1, *SHAPE).clone()


class SignGuide(nn.Module):
    def forward(self, x):
        positive = (x.flatten(1)[:, 0] > 0).float()
        return torch.stack([1 - positive, positive], 1)


def test_the_guided_generator_redraws_what_the_guide_rejects():
    torch.manual_seed(0)
    y = torch.arange(1000) % 2
    one = GuidedGenerator(Alternating(), SignGuide(), "normal", tries=1)
    many = GuidedGenerator(Alternating(), SignGuide(), "normal", tries=20)
    agree = lambda x: ((x.flatten(1)[:, 0] > 0).long() == y).float().mean().item()  # noqa: E731
    assert 0.4 < agree(one(torch.randn(1000, 3), y)) < 0.6  # one draw: the guide is not consulted
    assert agree(many(torch.randn(1000, 3), y)) == 1.0  # 2^-20 per sample of still being wrong
    with pytest.raises(ValueError, match="tries"):
        GuidedGenerator(Alternating(), SignGuide(), "normal", tries=0)


def test_relabel_gives_each_sample_the_guides_class():
    x = torch.randn(2500, *SHAPE)
    assert torch.equal(relabel(SignGuide(), x, batch_size=1000), (x.flatten(1)[:, 0] > 0).long())


def test_match_shares_keeps_the_class_shares_and_ranks_by_the_guide():
    """Two classes: the records of highest probability of class 1 get class 1, as many as the quota (an independent
    sort); quotas split n by largest remainder; where the argmax fills the quotas, match_shares is the argmax."""
    p1 = torch.rand(1000, generator=torch.Generator().manual_seed(0)) * 0.4  # a guide that calls every record class 0
    probs = torch.stack([1 - p1, p1], 1)
    labels = match_shares(probs, [0.8265, 0.1735])
    assert quotas([0.8265, 0.1735], 1000) == [827, 173] and int(labels.sum()) == 173
    assert set(torch.argsort(p1, descending=True)[:173].tolist()) == set(labels.nonzero().squeeze(1).tolist())
    assert quotas([1, 1, 1], 10) == [4, 3, 3] and quotas([0.5, 0.25, 0.25], 7) == [3, 2, 2]
    probs = torch.softmax(torch.randn(600, 3, generator=torch.Generator().manual_seed(1)) * 3, 1)
    counts = torch.bincount(probs.argmax(1), minlength=3).tolist()
    assert torch.equal(match_shares(probs, counts), probs.argmax(1))
    labels = match_shares(probs, [1, 1, 1])
    assert torch.bincount(labels).tolist() == [200, 200, 200]
    # a record moved off its most likely class is only ever put where that class had no room left
    assert (probs.gather(1, labels[:, None]).squeeze(1) <= probs.max(1).values).all()
    x = torch.randn(400, *SHAPE)
    assert torch.equal(relabel(SignGuide(), x, shares=[0.5, 0.5]), match_shares(SignGuide()(x).softmax(1), [0.5, 0.5]))
    for bad in ([1.0], [-1.0, 2.0], [0.0, 0.0]):
        with pytest.raises(ValueError, match="shares"):
            match_shares(probs[:, :2] if len(bad) == 2 else probs, bad)


def test_guide_settings_are_checked():
    with pytest.raises(ValueError, match="improved"):
        tiny(guide={})  # the default conversion gdp cannot compose DP-SGD
    with pytest.raises(ValueError, match="unknown"):
        tiny(guide={"epoch": 2}, conversion="improved")
    with pytest.raises(ValueError, match="share"):
        tiny(guide={"share": 1.0}, conversion="improved")
    with pytest.raises(ValueError, match="mode"):
        tiny(guide={"mode": "vote"}, conversion="improved")
    with pytest.raises(ValueError, match="rule"):
        tiny(guide={"rule": "vote"}, conversion="improved")
    assert tiny(guide={}, conversion="improved").guide_spec["rule"] == "argmax"  # images: the measured default
    with pytest.raises(ValueError, match="16 x 16"):
        guide_cnn((1, 8, 8), 2)


def test_a_guided_run_spends_the_budget_on_the_release_and_the_guide(tmp_path):
    model = tiny(conversion="improved", guide={"epochs": 2, "batch_size": 16})
    trainer = fit(model, 3, [PrivacyBudget(1.0, 1e-5, conversion="improved")], root=tmp_path)
    assert trainer.global_step == 3
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert 1.0 - 1e-5 <= report["epsilon"] <= 1.0 and report["conversion"] == "improved"
    mechanisms = report["mechanisms"]
    assert set(mechanisms) == {RELEASE, DPSGD} and mechanisms[RELEASE]["count"] == 1
    plan = model.guide_plan
    assert plan["sample_rate"] == 16 / 64 and mechanisms[DPSGD]["count"] == plan["steps"] == 8
    # the release alone is calibrated to half the budget, exactly
    assert mechanisms[RELEASE]["epsilon"]["data_independent"]["gdp"]["epsilon"] == pytest.approx(0.5, rel=1e-6)
    assert report["total"]["data_independent"]["pld"]["epsilon"] <= report["epsilon"]
    # mode=relabel (the default): the guide labels every sample, and the release carries it for generate.py
    x, y = model.sample(40, torch.zeros(40, dtype=torch.long))
    assert torch.equal(y, relabel(model.guide_net, x)) and model.release()["labeller"] is model.guide_net
    assert model.release()["labeller_shares"] is None  # images: rule argmax
    assert not isinstance(model.generator, GuidedGenerator)
    assert isinstance(tiny(conversion="improved", guide={"mode": "filter"}).generator, GuidedGenerator)
    # a resumed fit trains the guide no more
    guide = {k: v.clone() for k, v in model.guide_net.state_dict().items()}
    fit(model, 4, [PrivacyBudget(1.0, 1e-5, conversion="improved")], root=tmp_path)
    assert all(torch.equal(v, model.guide_net.state_dict()[k]) for k, v in guide.items())
    assert model.ledger.summary(1e-5)["mechanisms"][DPSGD]["count"] == 8
