"""nn/mixture.py GeneratorMixture: row i of a batch comes from member i mod k, whatever the labels' order."""
import pytest
import torch
from torch import nn

from dpgen.nn.mixture import GeneratorMixture


class Tagged(nn.Module):
    """A member whose rows say who made them: [tag, z, y]."""

    def __init__(self, tag: float):
        super().__init__()
        self.tag = tag

    def forward(self, z, y):
        return torch.cat([torch.full((len(z), 1), self.tag), z, y[:, None].float()], 1)


def test_rows_come_from_the_members_in_turn_with_their_own_inputs():
    mixture = GeneratorMixture([Tagged(0.0), Tagged(1.0), Tagged(2.0)])
    z, y = torch.randn(8, 2), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])  # labels sorted: each class still shared out
    out = mixture(z, y)
    assert out[:, 0].tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    assert torch.equal(out[:, 1:3], z) and torch.equal(out[:, 3], y.float())
    assert mixture(z[:2], y[:2])[:, 0].tolist() == [0, 1]  # fewer rows than members
    assert mixture(z[:0], y[:0]).shape == (0, 4)


def test_a_mixture_needs_two_members():
    with pytest.raises(ValueError, match="at least 2"):
        GeneratorMixture([Tagged(0.0)])
