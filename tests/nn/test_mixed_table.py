"""The tabular generator with continuous and one-hot categorical columns (nn/mixed_table.py)."""
import pytest
import torch

from dpgen.nn.mixed_table import MixedTableGenerator


def test_rows_are_continuous_in_unit_range_then_one_hot_blocks_exact_when_sampling():
    torch.manual_seed(0)
    g = MixedTableGenerator((7,), 2, z_dim=4, one_hot=[3, 2])  # 2 continuous columns, blocks of 3 and 2
    z, y = torch.randn(50, 4), torch.arange(50) % 2
    x = g(z, y)  # training mode: relaxed draws, each block a point of the simplex
    assert x.shape == (50, 7) and 0 <= x[:, :2].min() and x[:, :2].max() <= 1
    assert torch.allclose(x[:, 2:5].sum(1), torch.ones(50)) and torch.allclose(x[:, 5:].sum(1), torch.ones(50))
    x = g.eval()(z, y)
    for block in (x[:, 2:5], x[:, 5:]):
        assert set(block.unique().tolist()) <= {0.0, 1.0} and torch.equal(block.sum(1), torch.ones(50))
    assert [m.out_features for m in g.modules() if isinstance(m, torch.nn.Linear)] == [28, 14, 7]  # 4F, 2F, F


def test_a_block_draws_its_categories_with_the_softmax_probabilities_and_passes_gradients():
    torch.manual_seed(0)
    g = MixedTableGenerator((4,), 1, z_dim=2, one_hot=[3]).eval()
    last = g.net.linears[-1]
    with torch.no_grad():  # constant logits: column 0 (continuous) 0, the block log(0.2, 0.3, 0.5)
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.0, *torch.tensor([0.2, 0.3, 0.5]).log()]))
    x = g(torch.randn(20000, 2), torch.zeros(20000, dtype=torch.long))
    assert torch.allclose(x[:, 1:].mean(0), torch.tensor([0.2, 0.3, 0.5]), atol=0.015)
    x = g.train()(torch.randn(200, 2), torch.zeros(200, dtype=torch.long))
    x[:, 1:].mul(torch.tensor([1.0, 2.0, 3.0])).sum().backward()  # relaxed in training: the logits get a gradient
    assert last.bias.grad[1:].abs().min() > 0


def test_all_continuous_and_all_categorical_tables():
    z, y = torch.randn(8, 3), torch.zeros(8, dtype=torch.long)
    assert MixedTableGenerator((5,), 1, z_dim=3)(z, y).shape == (8, 5)
    x = MixedTableGenerator((5,), 1, z_dim=3, one_hot=[2, 3]).eval()(z, y)
    assert torch.equal(x.sum(1), torch.full((8,), 2.0))


@pytest.mark.parametrize("one_hot", [[4, 3], [1]])
def test_blocks_that_do_not_fit_or_have_one_category_are_refused(one_hot):
    with pytest.raises(ValueError, match="one-hot blocks"):
        MixedTableGenerator((5,), 2, z_dim=3, one_hot=one_hot)
