"""`ema_decay`: the released generator is a moving average of the trained one (methods.base.ema_update)."""
import copy

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from dpgen.callbacks.privacy_budget import PrivacyBudget
from dpgen.methods.base import ema_update
from dpgen.methods.gan import GAN
from test_pategan import Toy, fit, tiny


def test_ema_update_starts_at_the_first_weights_then_follows_the_decay():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    ema = copy.deepcopy(net)
    with torch.no_grad():
        ema[0].weight.fill_(7.0)
        net[1].running_mean.fill_(3.0)
    ema_update(ema, net, 0, 0.9)  # decay min(1 - 1/1, 0.9) = 0: the first step's weights
    assert torch.equal(ema[0].weight, net[0].weight) and torch.equal(ema[1].running_mean, net[1].running_mean)
    old = ema[0].weight.clone()
    with torch.no_grad():
        net[0].weight.add_(1.0)
    ema_update(ema, net, 1, 0.9)  # decay min(1/2, 0.9) = 1/2
    assert torch.allclose(ema[0].weight, 0.5 * old + 0.5 * net[0].weight)
    old = ema[0].weight.clone()
    with torch.no_grad():
        net[0].weight.add_(1.0)
    ema_update(ema, net, 99, 0.9)  # decay min(0.99, 0.9) = 0.9
    assert torch.allclose(ema[0].weight, 0.9 * old + 0.1 * net[0].weight)


class Trajectory(pl.Callback):
    """The trained generator's weights after every step."""

    def __init__(self):
        self.states = []

    def on_train_batch_end(self, trainer, pl_module, *args):
        self.states.append({k: v.detach().clone() for k, v in pl_module.net_g.state_dict().items()})


def test_a_method_with_ema_decay_releases_the_average_of_its_trained_generator():
    torch.manual_seed(0)
    model = tiny(lam=1000.0, ema_decay=0.5)
    trajectory = Trajectory()
    fit(model, steps=4, callbacks=[trajectory])
    weights = dict(model.net_g.named_parameters()).keys()  # averaged; buffers (BatchNorm statistics) copied
    expected = {k: v.clone() for k, v in trajectory.states[0].items()}  # step 0: decay 0
    for t, state in enumerate(trajectory.states[1:], start=1):
        decay = min(1 - 1 / (t + 1), 0.5)
        for k, v in state.items():
            expected[k] = decay * expected[k] + (1 - decay) * v if k in weights else v
    released = model.release()["generator"]
    assert released is model.net_ema is model.generator and released is not model.net_g
    for k, v in released.state_dict().items():
        assert torch.allclose(v, expected[k], atol=1e-6), k
    assert any(not torch.allclose(released.state_dict()[k], model.net_g.state_dict()[k]) for k in weights)
    # a data-dependent rollback restores the average with the generator: it is part of the released state
    assert any(k.startswith("net_ema.") for k in PrivacyBudget._released_state(model))


def test_without_ema_decay_the_trained_generator_is_released_and_bad_decays_are_refused():
    model = tiny()
    assert model.net_ema is None and model.generator is model.net_g
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="ema_decay"):
            tiny(ema_decay=bad)


def test_the_non_private_gan_keeps_its_average_too():
    torch.manual_seed(0)
    model = GAN((4,), 2, "table", z_dim=8, generator=dict(hidden=[16]), discriminator=dict(hidden=[16]),
                ema_decay=0.9)
    before = copy.deepcopy(model.net_ema.state_dict())
    trainer = pl.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, datamodule=Toy(batch_size=40))
    after = model.net_ema.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
