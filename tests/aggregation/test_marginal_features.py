"""aggregation/feature_maps.py MarginalFeatures: a table's rows as its soft k-way marginals. Every row has norm
exactly 1 for any input (the release's sensitivity), the class sums of exact records are the class's contingency
tables counted independently, and neighbouring data sets move the released sums by exactly sqrt(1 + a^2)."""
import itertools
import math

import numpy as np
import pytest
import torch

from dpgen.aggregation import feature_maps
from dpgen.aggregation.feature_maps import MarginalFeatures, WeightedConcat
from dpgen.aggregation.mean_embedding import RandomFourierFeatures, embedding_sums, sensitivity

ONE_HOT, N_CONT, BINS, A = (3, 2), 2, 4, 0.2  # 2 continuous columns, then blocks of 3 and 2 categories
DIM = N_CONT + sum(ONE_HOT)


def table(n: int, seed: int):
    """Records in the datamodules' layout: continuous columns in [0, 1], then exact one-hot blocks; labels in {0, 1}."""
    g = torch.Generator().manual_seed(seed)
    cont = torch.rand(n, N_CONT, generator=g, dtype=torch.float64)
    cats = [torch.randint(0, k, (n,), generator=g) for k in ONE_HOT]
    onehots = [torch.nn.functional.one_hot(c, k).double() for c, k in zip(cats, ONE_HOT)]
    return torch.cat([cont, *onehots], 1), torch.randint(0, 2, (n,), generator=g), cats


def soft_bin(value: float) -> np.ndarray:
    """Independent: the continuous column's unit vector, bump by bump."""
    bumps = np.array([math.exp(-0.5 * ((value - (b + 0.5) / BINS) * BINS) ** 2) for b in range(BINS)])
    return bumps / np.linalg.norm(bumps)


def row_by_kron(record: np.ndarray, order: int) -> np.ndarray:
    """Independent: the row as Kronecker products of the columns' unit vectors, set by set, / sqrt(sets)."""
    units = [soft_bin(v) for v in record[:N_CONT]]
    start = N_CONT
    for k in ONE_HOT:
        units.append(record[start:start + k] / np.linalg.norm(record[start:start + k]))
        start += k
    sets = list(itertools.combinations(range(len(units)), order))
    parts = []
    for s in sets:
        prod = np.ones(1)
        for c in s:
            prod = np.kron(prod, units[c])
        parts.append(prod)
    return np.concatenate(parts) / math.sqrt(len(sets))


@pytest.mark.parametrize("order", [1, 2, 3])
def test_rows_are_the_normalised_products_of_the_columns_unit_vectors(order):
    phi = MarginalFeatures(DIM, ONE_HOT, BINS, order).double()
    x, _, _ = table(7, 0)
    expected = np.stack([row_by_kron(r, order) for r in x.numpy()])
    assert phi.n_features == expected.shape[1]
    assert np.allclose(phi(x).numpy(), expected, atol=1e-12)


def test_class_sums_of_exact_records_are_each_class_contingency_table():
    """Two categorical columns: the block of the pair (3 x 2) in class c's sum is the count of each (colour, shape)
    among class c's records, / sqrt(the 6 pairs of 4 columns), counted here with numpy."""
    phi = MarginalFeatures(DIM, ONE_HOT, BINS, 2).double()
    x, y, cats = table(200, 1)
    sums = feature_maps.class_sums(phi, x, torch.nn.functional.one_hot(y, 2).double())
    sizes = [BINS] * N_CONT + list(ONE_HOT)
    offsets = np.cumsum([0] + [sizes[a] * sizes[b] for a, b in itertools.combinations(range(4), 2)])
    last = list(itertools.combinations(range(4), 2)).index((2, 3))
    for c in (0, 1):
        counts = np.zeros((3, 2))
        np.add.at(counts, (cats[0][y == c].numpy(), cats[1][y == c].numpy()), 1)
        block = sums[c, offsets[last]:offsets[last + 1]].numpy().reshape(3, 2)
        assert np.allclose(block * math.sqrt(6), counts, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_row_has_norm_one_for_any_input(dtype):
    """Exact records, relaxed one-hot blocks, values outside [0, 1], empty or negative blocks, inf and NaN."""
    phi = MarginalFeatures(DIM, ONE_HOT, BINS, 2).to(dtype)
    x, _, _ = table(5, 2)
    odd = torch.tensor([[0.0] * DIM, [-1.0] * DIM, [1e30] * DIM, [float("nan")] * DIM, [float("inf")] * DIM,
                        [-float("inf")] * DIM, [0.3, 2.0, 0.2, 0.5, 0.3, 0.9, 0.1],
                        [float("nan"), 0.5, -3.0, float("inf"), 0.0, 0.0, 0.0]], dtype=torch.float64)
    out = phi(torch.cat([x, odd]).to(dtype))
    assert torch.isfinite(out).all()
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    assert torch.allclose(out.norm(dim=1), torch.ones(len(out), dtype=dtype), atol=tol)


def test_adding_or_removing_one_record_moves_the_sums_by_exactly_the_sensitivity():
    phi = WeightedConcat([RandomFourierFeatures(DIM, 20, 1.0, seed=0), MarginalFeatures(DIM, ONE_HOT, BINS, 2)],
                         [1.0, 1.0]).double()
    x, y, _ = table(15, 3)
    base = embedding_sums([(x, y)], phi, 2, A)
    extra, extra_y, _ = table(10, 4)
    extra[0], extra[1], extra[2] = float("nan"), -5.0, 1e300
    moves = [(embedding_sums([(torch.cat([x, extra[i:i + 1]]), torch.cat([y, extra_y[i:i + 1]]))], phi, 2, A)
              - base).norm() for i in range(len(extra))]
    for i in range(len(x)):
        keep = torch.arange(len(x)) != i
        moves.append((base - embedding_sums([(x[keep], y[keep])], phi, 2, A)).norm())
    moves = torch.stack(moves)
    assert moves.max() <= sensitivity(A) * (1 + 1e-12) and moves.min() >= sensitivity(A) * (1 - 1e-12)


def test_the_loss_is_differentiable_in_relaxed_records():
    phi = MarginalFeatures(DIM, ONE_HOT, BINS, 2).double()
    x, y, _ = table(12, 5)
    target = feature_maps.class_sums(phi, x, torch.nn.functional.one_hot(y, 2).double()) / 6
    soft = (0.5 * x + 0.25).requires_grad_()
    loss = feature_maps.mmd_loss(phi, soft, y, target)
    loss.backward()
    assert torch.isfinite(soft.grad).all() and soft.grad.abs().sum() > 0


@pytest.mark.parametrize("order", [1, 2, 3])
def test_sums_and_loss_without_the_rows_equal_the_explicit_ones_with_their_gradients(order):
    phi = MarginalFeatures(DIM, ONE_HOT, BINS, order).double()
    x, y, _ = table(15, 6)
    onehot = torch.nn.functional.one_hot(y, 3).double()  # a third class with no record: its sums are 0
    soft = (0.6 * x + 0.2).requires_grad_()
    assert torch.allclose(phi.class_sums(soft, onehot), onehot.T @ phi(soft), atol=1e-12, rtol=0)
    target = phi.class_sums(x, onehot) / 7
    fast = phi.mmd_loss(soft, y, target)
    (fast_grad,) = torch.autograd.grad(fast, soft)
    explicit = feature_maps.explicit_mmd_loss(phi(soft), y, target)
    (explicit_grad,) = torch.autograd.grad(explicit, soft)
    assert fast.item() > 0 and math.isclose(fast.item(), explicit.item(), rel_tol=1e-10)
    assert torch.allclose(fast_grad, explicit_grad, atol=1e-12, rtol=1e-9)


def test_build_takes_the_tables_blocks_and_refuses_images_and_bad_settings():
    built = feature_maps.build([{"kind": "marginals", "bins": 5, "order": 1}], (DIM,), 64, 1.0, seed=0,
                               one_hot=ONE_HOT)
    block = built.blocks[0]
    assert isinstance(block, MarginalFeatures) and block.n_features == 2 * 5 + 3 + 2
    assert feature_maps.describe(built)["blocks"][0] == {"kind": "marginals", "order": 1, "bins": 5,
                                                         "one_hot": [3, 2], "weight": 1.0}
    with pytest.raises(ValueError, match="tabular data only"):
        feature_maps.build([{"kind": "marginals"}], (1, 4, 4), 64, 1.0, seed=0)
    with pytest.raises(ValueError, match="order"):
        feature_maps.build([{"kind": "marginals", "order": 5}], (DIM,), 64, 1.0, seed=0, one_hot=ONE_HOT)
    with pytest.raises(ValueError, match="fit in the table"):
        MarginalFeatures(4, (3, 2), BINS, 2)
    with pytest.raises(ValueError, match="unknown options"):
        feature_maps.build([{"kind": "marginals", "width": 3}], (DIM,), 64, 1.0, seed=0, one_hot=ONE_HOT)
