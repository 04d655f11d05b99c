"""aggregation/feature_maps.py: every map's rows have norm exactly 1 for any input (the release's sensitivity), its
per-class sums and generator loss agree with an independent computation, and neighbouring data sets move the
released sums by exactly sqrt(1 + a^2)."""
import math

import pytest
import torch

from dpgen.aggregation import feature_maps
from dpgen.aggregation.feature_maps import (ConvFeatures, NTKFeatures, PooledFourierFeatures, WeightedConcat,
                                            explicit_mmd_loss)
from dpgen.aggregation.mean_embedding import RandomFourierFeatures, embedding_sums, sensitivity

K, A, SHAPE = 3, 0.2, (1, 4, 4)


def records(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, *SHAPE, generator=g, dtype=torch.float64), torch.randint(0, K, (n,), generator=g)


def maps(dtype=torch.float64):
    ntk = NTKFeatures(16, 8, seed=0)
    conv = ConvFeatures(SHAPE, channels=5, kernel=3, pool=2, seed=1, moments=2)
    concat = WeightedConcat([RandomFourierFeatures(16, 20, 1.0, seed=2), NTKFeatures(16, 6, seed=3),
                             ConvFeatures(SHAPE, 4, 3, 2, seed=4), PooledFourierFeatures(SHAPE, 2, 10, 0.5, seed=5)],
                            [1.0, 2.0, 0.5, 0.5])
    return {"ntk": ntk.to(dtype), "conv": conv.to(dtype), "concat": concat.to(dtype)}


def ntk_by_autograd(ntk: NTKFeatures, x: torch.Tensor) -> torch.Tensor:
    """Independent: the gradient of the network f(x) = v . relu(W x + b) + c in (v, b, W, c) by autograd, / norm."""
    rows = []
    for xi in x.flatten(1).double():
        params = [p.detach().double().clone().requires_grad_() for p in (ntk.v, ntk.b, ntk.w)]
        c = torch.zeros((), dtype=torch.float64, requires_grad=True)
        v, b, w = params
        grads = torch.autograd.grad(v @ torch.relu(w @ xi + b) + c, [v, b, w, c])
        u = torch.cat([g.flatten() for g in grads])
        rows.append(u / u.norm())
    return torch.stack(rows)


def conv_by_loops(conv: ConvFeatures, x: torch.Tensor) -> torch.Tensor:
    """Independent: the random convolution written as explicit sums over the padded patches."""
    c, h, w = conv.shape
    k, p, st = conv.kernel, conv.kernel // 2, conv.stride
    padded = torch.nn.functional.pad(x.reshape(len(x), c, h, w).double(), (p, p, p, p))
    h, w = (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1
    out = torch.zeros(len(x), conv.channels, h, w, dtype=torch.float64)
    for i in range(h):
        for j in range(w):
            patch = padded[:, :, st * i:st * i + k, st * j:st * j + k].flatten(1)
            out[:, :, i, j] = patch @ conv.w.double().flatten(1).T + conv.b.double()
    out = out.relu()
    s = conv.pool
    f = out[:, :, :h // s * s, :w // s * s].reshape(len(x), conv.channels, h // s, s, w // s, s).mean((3, 5))
    f = f.flatten(1)
    if conv.moments == 2:
        f = torch.cat([f, f * f], 1)
    return f / f.norm(dim=1, keepdim=True)


def test_ntk_rows_are_the_normalised_parameter_gradient_of_the_random_network():
    ntk = maps()["ntk"]
    x, _ = records(7, 1)
    assert ntk.n_features == 2 * 8 + 8 * 16 + 1  # the network's parameter count
    assert torch.allclose(ntk(x), ntk_by_autograd(ntk, x), atol=1e-12)


def test_conv_rows_are_the_normalised_pooled_random_convolution():
    conv = maps()["conv"]
    x, _ = records(5, 2)
    assert conv.n_features == 2 * 5 * 2 * 2
    assert torch.allclose(conv(x), conv_by_loops(conv, x), atol=1e-12)
    pooled = PooledFourierFeatures(SHAPE, 2, 10, 0.5, seed=5).double()  # the rff of the 2 x 2 block means
    means = x.reshape(5, 2, 2, 2, 2).mean((2, 4)).flatten(1)
    assert torch.allclose(pooled(x), pooled.rff(means), atol=1e-12)
    strided = ConvFeatures((1, 7, 7), channels=3, kernel=3, pool=2, seed=1, stride=2).double()  # 4 x 4 -> 2 x 2
    x7 = torch.rand(4, 1, 7, 7, dtype=torch.float64)
    assert strided.n_features == 3 * 2 * 2
    assert torch.allclose(strided(x7), conv_by_loops(strided, x7), atol=1e-12)


def test_concat_scales_each_block_by_the_root_of_its_weight_share():
    concat = maps()["concat"]
    x, _ = records(5, 3)
    rows = concat(x)
    weights = [1.0 / 4, 2.0 / 4, 0.5 / 4, 0.5 / 4]
    for part, block, w in zip(rows.split(concat.sizes, 1), concat.blocks, weights):
        assert torch.allclose(part, math.sqrt(w) * block(x), atol=1e-12)
        assert torch.allclose(part.norm(dim=1), torch.full((5,), math.sqrt(w), dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("name", ["ntk", "conv", "concat"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_row_has_norm_one_for_any_input_and_bad_records_map_to_one_fixed_vector(name, dtype):
    """In [0, 1], far outside it, all zeros (no positive feature), huge (overflowing), inf and NaN: norm 1; a record
    with a non-finite entry maps to a fixed public vector, and no other record's row changes."""
    phi = maps(dtype)[name]
    x, _ = records(6, 4)
    big = torch.finfo(dtype).max
    far = -1e3 * torch.rand(SHAPE, generator=torch.Generator().manual_seed(9))
    odd = torch.stack([torch.zeros(SHAPE), -torch.ones(SHAPE), 1e3 * torch.ones(SHAPE), far])
    bad = torch.stack([torch.full(SHAPE, float("inf")), torch.full(SHAPE, float("nan")),
                       torch.full(SHAPE, -float("inf")), torch.full(SHAPE, big, dtype=torch.float64)]).to(dtype)
    bad[0, 0, 1, 1] = 0.5  # one finite entry among infs
    inputs = torch.cat([x.to(dtype), odd.to(dtype), bad])
    out = phi(inputs)
    assert torch.isfinite(out).all()
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    assert torch.allclose(out.norm(dim=1), torch.ones(len(out), dtype=dtype), atol=tol)
    assert torch.equal(out[-4:-1], out[-4:-3].expand(3, -1))  # the non-finite records: one fixed vector
    assert torch.equal(out[:6], phi(x.to(dtype)))


@pytest.mark.parametrize("name", ["ntk", "conv", "concat"])
def test_class_sums_and_the_loss_match_the_explicit_rows(name):
    phi = maps()[name]
    x, y = records(30, 5)
    x[3] = float("nan")
    onehot = torch.nn.functional.one_hot(y, K).double()
    rows = phi(x)
    assert torch.allclose(feature_maps.class_sums(phi, x, onehot), onehot.T @ rows, atol=1e-12)
    target = 0.1 * torch.randn(K, phi.n_features, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = sum((rows[y == c] - target[c]).sum(0).pow(2).sum() for c in range(K)) / len(y) ** 2
    assert feature_maps.mmd_loss(phi, x, y, target).item() == pytest.approx(expected.item(), rel=1e-10)
    assert explicit_mmd_loss(rows, y, target).item() == pytest.approx(expected.item(), rel=1e-10)


def test_the_ntk_loss_has_the_gradient_of_the_explicit_loss():
    phi = maps()["ntk"]
    x, y = records(12, 6)
    target = 0.05 * torch.randn(K, phi.n_features, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    phi.mmd_loss(a, y, target).backward()
    explicit_mmd_loss(phi(b), y, target).backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-12)


@pytest.mark.parametrize("name", ["ntk", "conv", "concat"])
def test_adding_or_removing_one_record_moves_the_sums_by_exactly_the_sensitivity(name):
    phi = maps()[name]
    x, y = records(15, 7)
    base = embedding_sums([(x, y)], phi, K, A)
    extra_x, extra_y = records(40, 8)
    extra_x[0], extra_x[1], extra_x[2], extra_x[3] = 0.0, 1.0, float("nan"), 1e300
    moves = [(embedding_sums([(torch.cat([x, extra_x[i:i + 1]]), torch.cat([y, extra_y[i:i + 1]]))], phi, K, A)
              - base).norm() for i in range(len(extra_x))]
    for i in range(len(x)):
        keep = torch.arange(len(x)) != i
        moves.append((base - embedding_sums([(x[keep], y[keep])], phi, K, A)).norm())
    moves = torch.stack(moves)
    assert moves.max() <= sensitivity(A) * (1 + 1e-12) and moves.min() >= sensitivity(A) * (1 - 1e-12)


def test_build_keeps_the_default_and_seeds_blocks_publicly():
    plain = feature_maps.build(None, SHAPE, 64, 2.0, seed=5)
    assert isinstance(plain, RandomFourierFeatures)
    assert torch.equal(plain.w, RandomFourierFeatures(16, 64, 2.0, 5).w)
    built = feature_maps.build([{"kind": "rff"}, {"kind": "ntk", "width": 4, "weight": 3}], SHAPE, 64, 2.0, seed=5)
    assert torch.equal(built.blocks[0].w, plain.w)  # the first rff block draws the default's frequencies
    assert torch.equal(built.blocks[1].w, NTKFeatures(16, 4, seed=6).w)
    assert built.weights == [0.25, 0.75]
    assert feature_maps.describe(built)["blocks"][1] == {"kind": "ntk", "width": 4, "seed": 6, "weight": 0.75}
    pooled = feature_maps.build([{"kind": "rff", "pool": 2}], SHAPE, 64, 2.0, seed=5).blocks[0]
    assert pooled.rff.bandwidth == 1.0 and pooled.rff.w.shape == (32, 4)
    with pytest.raises(ValueError, match="unknown feature block kind"):
        feature_maps.build([{"kind": "scatter"}], SHAPE, 64, 2.0, seed=0)
    with pytest.raises(ValueError, match="unknown options"):
        feature_maps.build([{"kind": "ntk", "depth": 2}], SHAPE, 64, 2.0, seed=0)
