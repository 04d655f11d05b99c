"""aggregation/mean_embedding.py: features of norm 1, the sensitivity by neighbouring data sets, the noise."""
import math

import pytest
import torch

from dpgen.aggregation.mean_embedding import (EmbeddingRelease, RandomFourierFeatures, embedding_sums, release,
                                              sensitivity)

K, A = 3, 0.2


def records(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 4, 4, generator=g), torch.randint(0, K, (n,), generator=g)


def features(dtype=torch.float64):
    return RandomFourierFeatures(16, 64, bandwidth=1.0, seed=0).to(dtype)


def sums(x, y, phi):
    return embedding_sums([(x, y)], phi, K, A)


def test_features_have_norm_one_and_depend_on_the_seed_only():
    x, _ = records(50, 1)
    x = torch.cat([x, torch.zeros(1, 1, 4, 4), torch.ones(1, 1, 4, 4)])
    assert torch.allclose(features()(x).norm(dim=1), torch.ones(len(x), dtype=torch.float64), atol=1e-12)
    assert torch.equal(features().w, features().w)
    assert not torch.equal(features().w, RandomFourierFeatures(16, 64, 1.0, seed=1).w.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_non_finite_or_overflowing_records_map_to_one_fixed_unit_vector(dtype):
    """One record of inf, NaN or the dtype's largest finite value (whose W x overflows) must not make a NaN in the release: it maps to
    phi(0), norm 1, so the sensitivity holds for every input and no other record's features change."""
    phi = features(dtype)
    x, y = records(4, 5)
    bad = torch.stack([torch.full((1, 4, 4), float("inf")), torch.full((1, 4, 4), float("nan")),
                       torch.full((1, 4, 4), torch.finfo(dtype).max, dtype=torch.float64)]).to(dtype)
    out = phi(torch.cat([x.to(dtype), bad]))
    assert torch.isfinite(out).all()
    assert torch.allclose(out.norm(dim=1), torch.ones(len(out), dtype=dtype), atol=1e-6)
    assert torch.equal(out[4:], phi(torch.zeros(3, 1, 4, 4, dtype=dtype)))
    assert torch.equal(out[:4], phi(x.to(dtype)))
    total = embedding_sums([(torch.cat([x.to(dtype), bad]), torch.cat([y, torch.tensor([0, 1, 2])]))], phi, K, A)
    assert torch.isfinite(total).all()


def test_adding_or_removing_one_record_moves_the_statistic_by_exactly_the_sensitivity():
    phi = features()
    x, y = records(20, 2)
    base = sums(x, y, phi)
    extra_x, extra_y = records(200, 3)
    extra_x[0], extra_x[1] = 0.0, 1.0  # the corners of the pixel cube too
    moves = [(sums(torch.cat([x, extra_x[i:i + 1]]), torch.cat([y, extra_y[i:i + 1]]), phi) - base).norm()
             for i in range(len(extra_x))]
    keep = torch.ones(len(x), dtype=torch.bool)
    for i in range(len(x)):  # remove record i
        keep[i] = False
        moves.append((base - sums(x[keep], y[keep], phi)).norm())
        keep[i] = True
    moves = torch.stack(moves)
    bound = sensitivity(A)
    assert bound == pytest.approx(math.sqrt(1 + A**2))
    assert moves.max() <= bound * (1 + 1e-12)  # the bound holds ...
    assert moves.min() >= bound * (1 - 1e-12)  # ... and every record attains it: it is tight


def test_chunks_give_the_same_sums_as_one_pass():
    phi = features()
    x, y = records(50, 4)
    chunked = embedding_sums([(x[i:i + 7], y[i:i + 7]) for i in range(0, 50, 7)], phi, K, A)
    assert torch.allclose(chunked, sums(x, y, phi), atol=1e-12)
    assert torch.allclose(chunked[:, -1] / A, torch.bincount(y, minlength=K).double())


def test_the_release_adds_gaussian_noise_of_std_sigma_and_post_processes_to_means():
    phi = RandomFourierFeatures(16, 2000, bandwidth=1.0, seed=0)
    x, y = records(60, 5)
    exact = sums(x, y, phi)
    out = release([(x, y)], phi, K, A, sigma=3.0)
    noise = out.sums - exact
    assert noise.std().item() == pytest.approx(3.0, rel=0.05) and abs(noise.mean().item()) < 0.1
    assert out.mu == pytest.approx(sensitivity(A) / 3.0)
    means, counts = EmbeddingRelease(exact, A, 1.0).class_means()
    assert torch.allclose(counts, torch.bincount(y, minlength=K).double())
    assert torch.allclose(means[0], phi(x[y == 0]).double().mean(0), atol=1e-6)


def test_several_bandwidths_approximate_the_mean_of_their_gaussian_kernels_at_norm_one():
    bandwidths = (0.5, 2.0)
    phi = RandomFourierFeatures(16, 40_000, bandwidth=bandwidths, seed=0).double()
    x, _ = records(6, 7)
    x = x.flatten(1).double()
    f = phi(x)
    assert torch.allclose(f.norm(dim=1), torch.ones(6, dtype=torch.float64), atol=1e-12)
    dist2 = torch.cdist(x, x) ** 2
    mixture = sum(torch.exp(-dist2 / (2 * b**2)) for b in bandwidths) / 2
    single = torch.exp(-dist2 / (2 * 2.0**2))
    # 20,000 frequencies: the Monte Carlo error of each kernel value is about 1 / sqrt(20,000) = 0.007
    assert (f @ f.T - mixture).abs().max() < 0.03
    assert (mixture - single).abs().max() > 0.1  # the mixture is not the wider kernel alone
    # frequency rows alternate between the bandwidths: the norms of the rows of each half differ by their ratio
    scales = phi.w.norm(dim=1)
    assert scales[0::2].mean() / scales[1::2].mean() == pytest.approx(4.0, rel=0.05)
    assert phi.bandwidth == list(bandwidths)
    with pytest.raises(ValueError, match="bandwidths > 0"):
        RandomFourierFeatures(16, 64, bandwidth=(1.0, 0.0), seed=0)


def test_one_bandwidth_in_a_list_draws_the_same_features_as_the_number():
    assert torch.equal(RandomFourierFeatures(16, 64, [1.5], seed=3).w, RandomFourierFeatures(16, 64, 1.5, seed=3).w)
