"""Fully connected conditional nets: DP-GAN's (G-PATE appendix E), DP-CGAN's (Torkzadehmahani et al. 2019) and
PATE-GAN's for tables."""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from dpgen.nn.labels import one_hot


class HalfReLU(nn.Module):
    """0.5 * ReLU(x), optionally clamped to [-bound, bound] (G-PATE appendix E, DP-GAN: "0.5 x ReLU activation
    layers ... kept feature's value between [-0.5, 0.5] during the forward process")."""

    def __init__(self, bound: float | None = None):
        super().__init__()
        self.bound = bound

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = 0.5 * F.relu(x)
        return x if self.bound is None else x.clamp(-self.bound, self.bound)


OUTPUTS = {None: nn.Identity, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


def activation(name: str, bound: float | None) -> nn.Module:
    if name == "half_relu":
        return HalfReLU(bound)
    if name in ("relu", "tanh"):
        return {"relu": nn.ReLU, "tanh": nn.Tanh}[name]()
    if name == "leaky_relu":
        return nn.LeakyReLU(0.2)
    raise ValueError(f"unknown activation {name!r} (half_relu, relu, leaky_relu, tanh)")


def table_hidden(features: int) -> tuple[int, int, int]:
    """PATE-GAN section 5 (hyper-parameters): hidden sizes d, d/2, d for a table of d features."""
    return features, max(features // 2, 1), features


class ConditionalMLP(nn.Module):
    """in_dim -> hidden... -> out_dim, the one-hot label concatenated to the input of every layer
    (`label_every_layer`: DP-GAN, PATE-GAN's tables) or to the first layer only (DP-CGAN's reference nets);
    optional BatchNorm after each hidden linear layer and an output activation."""

    def __init__(self, in_dim: int, out_dim: int, num_classes: int, hidden: Sequence[int],
                 activation_name: str = "relu", feature_bound: float | None = None,
                 label_every_layer: bool = True, batch_norm: bool = False, out_activation: str | None = None):
        super().__init__()
        if out_activation not in OUTPUTS:
            raise ValueError(f"unknown output activation {out_activation!r} (sigmoid, tanh or none)")
        self.num_classes, self.label_every_layer = num_classes, label_every_layer
        dims = [in_dim, *hidden, out_dim]
        self.linears = nn.ModuleList()
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            self.linears.append(nn.Linear(a + (num_classes if i == 0 or label_every_layer else 0), b))
        self.norms = nn.ModuleList(nn.BatchNorm1d(b) if batch_norm else nn.Identity() for b in hidden)
        self.acts = nn.ModuleList(activation(activation_name, feature_bound) for _ in hidden)
        self.out_act = OUTPUTS[out_activation]()

    def forward(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        onehot = one_hot(y, self.num_classes, h.dtype)
        for i, linear in enumerate(self.linears):
            if i == 0 or self.label_every_layer:
                h = torch.cat([h, onehot], 1)
            h = linear(h)
            if i < len(self.acts):
                h = self.acts[i](self.norms[i](h))
        return self.out_act(h)


class FCGenerator(nn.Module):
    """[z, y] -> a record of `shape` in [0, 1] (sigmoid output); `batch_norm`: BatchNorm after each hidden layer
    (DP-MERF's generator)."""

    def __init__(self, shape: Sequence[int], num_classes: int, z_dim: int = 128, hidden: Sequence[int] = (256, 512),
                 activation: str = "half_relu", feature_bound: float | None = 0.5, label_every_layer: bool = True,
                 batch_norm: bool = False):
        super().__init__()
        self.shape, self.z_dim = tuple(shape), z_dim
        self.net = ConditionalMLP(z_dim, math.prod(self.shape), num_classes, tuple(hidden), activation,
                                 feature_bound, label_every_layer, batch_norm)

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(z, y)).view(-1, *self.shape)


class FCDiscriminator(nn.Module):
    """D(x, y) -> logit (b,). Any record shape (images are flattened)."""

    def __init__(self, shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (64, 64),
                 activation: str = "half_relu", feature_bound: float | None = 0.5, label_every_layer: bool = True,
                 batch_norm: bool = False):
        super().__init__()
        self.shape = tuple(shape)
        self.net = ConditionalMLP(math.prod(self.shape), 1, num_classes, tuple(hidden), activation, feature_bound,
                                 label_every_layer, batch_norm)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1), y).squeeze(1)
