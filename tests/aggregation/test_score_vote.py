"""PATE-GAN's score vote (dpgen.aggregation.score_vote): its sensitivity against the worst pair of neighbouring
teacher ensembles, its noise against its std, its price against an independent Gaussian PLD."""
import math

import numpy as np
import pytest
import torch
from dp_accounting.pld.privacy_loss_distribution import from_gaussian_mechanism

from dpgen.aggregation import score_vote
from dpgen.privacy.rdp import DEFAULT_ORDERS


def test_one_changed_teacher_moves_the_mean_scores_by_at_most_the_sensitivity():
    """Neighbouring data sets differ in one teacher. Its clipped scores on n queries move by at most 2 clip each;
    the worst case (every score from +clip to -clip) reaches the bound, and arbitrary other changes stay below."""
    k, n, clip = 10, 16, 3.0
    g = torch.Generator().manual_seed(0)
    logits = 5 * torch.randn(k, n, generator=g)
    bound = score_vote.sensitivity(clip, k, n)
    assert bound == pytest.approx(2 * clip * 4 / 10)  # 2 clip sqrt(n) / k

    def mean_scores(l):
        return l.clamp(-clip, clip).mean(0)

    worst_a, worst_b = logits.clone(), logits.clone()
    worst_a[3], worst_b[3] = 100.0, -100.0
    assert float((mean_scores(worst_a) - mean_scores(worst_b)).norm()) == pytest.approx(bound)
    for _ in range(200):
        other = logits.clone()
        other[int(torch.randint(k, (1,), generator=g))] = 50 * torch.randn(n, generator=g)
        assert float((mean_scores(other) - mean_scores(logits)).norm()) <= bound + 1e-6


def test_release_is_the_clipped_mean_plus_noise_of_the_announced_std():
    k, n, clip, noise = 4, 20000, 2.0, 0.5
    logits = torch.tensor([[-9.0], [1.0], [0.5], [9.0]]).expand(k, n)  # clipped: -2, 1, 0.5, 2 -> mean 0.375
    release = score_vote.score_vote(logits, clip, noise, np.random.default_rng(0))
    sigma = noise * 2 * clip * math.sqrt(n) / k
    assert release.sigma == pytest.approx(sigma) and release.mu == 2.0  # 1 / noise
    centred = release.scores.double() - 0.375
    assert abs(float(centred.mean())) < 4 * sigma / math.sqrt(n)
    assert float(centred.std()) == pytest.approx(sigma, rel=0.03)  # 0.7% standard error at n = 20,000
    with pytest.raises(ValueError, match="clip > 0 and noise > 0"):
        score_vote.score_vote(logits, clip, 0.0, np.random.default_rng(0))


def test_steps_are_gaussian_releases_composed_as_one_gaussian():
    """T steps of r releases, each (1 / noise)-GDP, are the Gaussian mechanism with std noise / sqrt(T r) (Dong et
    al. 2022 Cor. 3.3): the budget's epsilon equals dp_accounting's PLD of that Gaussian, and the planner's step
    count is the last one inside the budget."""
    noise, releases, steps = 20.0, 2, 300
    cost = score_vote.step_cost(noise, releases, DEFAULT_ORDERS)
    eps = cost.epsilon(1e-5, "data_dependent", "gdp", n=steps)  # data_dependent resolves to the sound bound
    pld = from_gaussian_mechanism(noise / math.sqrt(steps * releases), value_discretization_interval=1e-4)
    assert eps == pytest.approx(pld.get_epsilon_for_delta(1e-5), rel=2e-3)
    fits = cost.steps(eps, 1e-5, "data_independent", "gdp")
    assert fits == steps
