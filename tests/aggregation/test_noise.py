"""Privacy noise comes from the OS's entropy: never from the run's seed, never the same twice."""
import pytest
import torch

from dpgen.aggregation.noise import secret_generator


@pytest.mark.secret_noise
def test_noise_does_not_follow_the_global_seed():
    draws = []
    for _ in range(2):
        torch.manual_seed(0)  # what seed_everything(cfg.seed) does, also on resume
        draws.append(torch.randn(8, generator=secret_generator()))
    assert not torch.equal(draws[0], draws[1])
