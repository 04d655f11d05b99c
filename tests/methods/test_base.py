"""`frozen`: the net a generator step goes through takes no gradient, and is trainable again afterwards."""
import pytest
import torch
from opacus import GradSampleModule
from torch import nn

from dpgen.methods.base import frozen


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
