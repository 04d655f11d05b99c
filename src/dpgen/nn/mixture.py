"""An equal mixture of conditional generators of one architecture, each with its own weights: sampled as one
generator (row i of a batch from member i mod k), trained member by member (methods/dpmerf.py `members`)."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class GeneratorMixture(nn.Module):
    """G(z, y) with row i from members[i mod k] (k the members, or the rows if fewer): the rows of every label are
    shared out evenly among the members whatever the order of the labels. `one_hot` (a table's category blocks,
    nn/mixed_table.py) is the members'."""

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"a mixture needs at least 2 generators, got {len(members)}")
        self.members = nn.ModuleList(members)
        self.one_hot = getattr(members[0], "one_hot", None)

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        k = min(len(self.members), len(z))  # a batch of fewer than k rows leaves the last members out
        if k == 0:
            return self.members[0](z, y)
        parts = [member(z[j::k], y[j::k]) for j, member in zip(range(k), self.members)]
        out = parts[0].new_empty((len(z), *parts[0].shape[1:]))
        for j, part in enumerate(parts):
            out[j::k] = part
        return out
