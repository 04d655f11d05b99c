"""`frozen`: the net a generator step goes through takes no gradient, and is trainable again afterwards."""
import pytest
import torch
from opacus import GradSampleModule
from torch import nn

from dpgen.methods.base import PrivateGenerator, frozen, running_stats_kept
from dpgen.methods.dpcgan import DPCGAN
from dpgen.methods.dpgan import DPGAN
from dpgen.methods.gpate import GPATE
from dpgen.methods.gswgan import GSWGAN
from dpgen.methods.pate_triplegan import PATETripleGAN
from dpgen.methods.pategan import PATEGAN
from dpgen.privacy.ledger import NEIGHBOURING


def test_frozen_net_takes_no_gradient_and_no_per_sample_gradient():
    net = GradSampleModule(nn.Linear(3, 1))
    x = torch.randn(4, 3, requires_grad=True)
    with frozen(net):
        net(x).sum().backward()
    assert x.grad is not None  # the gradient flows through to the input (the generator's output)
    assert all(p.grad is None and getattr(p, "grad_sample", None) is None for p in net.parameters())
    assert all(p.requires_grad for p in net.parameters()) and net.hooks_enabled


@pytest.mark.parametrize("wrap", [False, True])
def test_an_error_inside_leaves_the_net_trainable(wrap):
    net = nn.Linear(3, 1)
    net = GradSampleModule(net) if wrap else net
    with pytest.raises(RuntimeError, match="boom"):
        with frozen(net):
            assert not any(p.requires_grad for p in net.parameters())
            raise RuntimeError("boom")
    assert all(p.requires_grad for p in net.parameters())
    assert getattr(net, "hooks_enabled", True)


def test_running_stats_kept_restores_batch_norm_statistics_even_on_an_error():
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with running_stats_kept(net):
        out = net(torch.randn(8, 3) * 5 + 2)
        assert not torch.equal(net[1].running_mean, before["1.running_mean"])  # training mode did move them
    assert out.std(0).mean() > 0.5  # batch statistics were used inside the block
    with pytest.raises(RuntimeError), running_stats_kept(net):
        net(torch.randn(8, 3))
        raise RuntimeError("boom")
    for key, value in net.state_dict().items():
        assert torch.equal(value, before[key]), key


@pytest.mark.parametrize("log_private", [False, True])
def test_losses_on_private_records_are_logged_only_when_asked(log_private, monkeypatch):
    module = PrivateGenerator((2,), 2, "table", z_dim=2)
    logged = {}
    monkeypatch.setattr(module, "log_dict", lambda values, **kw: logged.update(values))
    module.log_private = log_private
    module.log_losses({"loss/g": 1.0}, private={"loss/teachers": 2.0})
    assert logged == ({"loss/g": 1.0, "private/loss/teachers": 2.0} if log_private else {"loss/g": 1.0})


def test_every_private_method_says_which_neighbouring_data_sets_its_guarantee_is_about():
    relations = {cls.__name__: cls.neighbouring for cls in (GPATE, PATEGAN, GSWGAN, DPGAN, DPCGAN, PATETripleGAN)}
    assert relations == {"GPATE": "add_remove", "PATEGAN": "add_remove", "GSWGAN": "add_remove",
                         "DPGAN": "add_remove", "DPCGAN": "add_remove", "PATETripleGAN": "add_remove"}
    assert set(relations.values()) <= set(NEIGHBOURING)
