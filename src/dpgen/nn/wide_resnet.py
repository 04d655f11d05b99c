"""A small Wide ResNet for the downstream evaluation (`eval.classifier=wrn`): one of the classifier families the
DPImageBench benchmark averages over, to compare with the G-PATE appendix E CNN (docs/EVALUATION.md).

Zagoruyko & Komodakis 2016 ("Wide Residual Networks", section 2): WRN-d-k has three groups of (d - 4) / 6
pre-activation basic blocks (BN -> ReLU -> conv 3x3, twice) of 16k, 32k and 64k channels after a 16-channel
stem, the second and third groups halving the resolution, then BN -> ReLU -> global average pooling -> linear.
"""

from __future__ import annotations

import torch
from torch import nn


class WideBlock(nn.Module):
    """Pre-activation basic block with dropout between its convolutions; a 1x1 convolution on the shortcut when
    the shape changes (Zagoruyko & Komodakis 2016, figure 1d)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, dropout: float):
        super().__init__()
        self.pre = nn.Sequential(nn.BatchNorm2d(in_channels), nn.ReLU())
        self.residual = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(out_channels), nn.ReLU(), nn.Dropout(dropout),
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
        )
        same = in_channels == out_channels and stride == 1
        self.shortcut = None if same else nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = self.pre(x)
        return self.residual(activated) + (x if self.shortcut is None else self.shortcut(activated))


class WideResNet(nn.Module):
    """WRN-`depth`-`widen` for images of any size (global average pooling before the classifier)."""

    def __init__(self, in_channels: int, num_classes: int, depth: int = 16, widen: int = 2, dropout: float = 0.0):
        super().__init__()
        if depth < 10 or (depth - 4) % 6:
            raise ValueError(f"a WRN's depth is 6n + 4 with n >= 1, got {depth}")
        blocks = (depth - 4) // 6
        widths = [16, 16 * widen, 32 * widen, 64 * widen]
        layers: list[nn.Module] = [nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)]
        for group in range(3):
            for i in range(blocks):
                layers.append(WideBlock(widths[group] if i == 0 else widths[group + 1], widths[group + 1],
                                        stride=2 if group > 0 and i == 0 else 1, dropout=dropout))
        layers += [nn.BatchNorm2d(widths[3]), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(widths[3], num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def downstream_wrn(in_channels: int, num_classes: int, image_size: int | tuple[int, int]) -> WideResNet:
    """The downstream WRN: WRN-16-2 (0.69 M parameters; an epoch of 54,000 MNIST images about 8 min on one loaded
    CPU thread, WRN-16-4 three times that). `image_size` is not needed (global pooling): the signature of the
    other downstream classifiers."""
    return WideResNet(in_channels, num_classes, depth=16, widen=2)
