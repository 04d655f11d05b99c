"""A conditional generator for tables with continuous and one-hot categorical columns, in the layout of the
project's tabular datamodules (data/tables.py): the continuous columns first, scaled to [0, 1], then one one-hot
block per categorical column."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from dpgen.nn.fc import ConditionalMLP


class MixedTableGenerator(nn.Module):
    """[z, one-hot y] -> hidden (BatchNorm, ReLU) -> a row of `shape` = (F,): the first F - sum(one_hot) columns
    through a sigmoid (continuous, in [0, 1]); each following block of one_hot[i] columns is one category drawn from
    the softmax of its logits. In eval mode (sampling: nn/generator.py `generate`) the draw is an exact one-hot
    vector (Gumbel-max); in training mode it is its relaxation, the Gumbel-softmax at temperature `tau` (Jang et
    al. 2017; 0.2 as CTGAN), near one-hot and differentiable. Measured on a two-class table with a 3-value column
    (noise-free DP-MERF, 400 steps): tau 0.2 learns the class-conditional category shares, minority values
    included (0.05-0.08 for 0.07); softmax outputs or tau 1 drop the minority value (0.00), and the hard
    straight-through estimator diverges (loss 0.24 -> 0.43).

    The layout of DP-MERF's tabular generator (Harder et al. 2021: MLP 4F -> 2F, BatchNorm, ReLU, the label at the
    input only), with a category drawn per block where its code rounds sigmoid outputs of binary columns."""

    def __init__(self, shape: Sequence[int], num_classes: int, z_dim: int, hidden: Sequence[int] | None = None,
                 one_hot: Sequence[int] = (), batch_norm: bool = True, tau: float = 0.2):
        super().__init__()
        (features,) = shape
        self.one_hot, self.tau = tuple(int(k) for k in one_hot), float(tau)
        self.n_continuous = features - sum(self.one_hot)
        if self.n_continuous < 0 or any(k < 2 for k in self.one_hot) or not self.tau > 0:
            raise ValueError(f"one-hot blocks {list(self.one_hot)} of a {features}-column table: need blocks of >= 2 "
                             f"columns that fit in the table, and tau > 0 (got {tau})")
        hidden = tuple(hidden) if hidden else (4 * features, 2 * features)
        self.shape, self.z_dim = (features,), int(z_dim)
        self.net = ConditionalMLP(z_dim, features, num_classes, hidden, "relu", label_every_layer=False,
                                  batch_norm=batch_norm)

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        continuous, *blocks = self.net(z, y).split([self.n_continuous, *self.one_hot], 1)
        return torch.cat([continuous.sigmoid(), *map(self.draw, blocks)], 1)

    def draw(self, logits: torch.Tensor) -> torch.Tensor:
        """A category per row from softmax(logits): relaxed in training mode, exact one-hot in eval mode (the
        argmax of the same Gumbel-perturbed logits)."""
        soft = F.gumbel_softmax(logits, tau=self.tau)
        return soft if self.training else F.one_hot(soft.argmax(1), logits.shape[1]).to(logits.dtype)
