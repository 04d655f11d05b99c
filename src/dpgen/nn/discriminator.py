"""G-PATE's conditional teacher discriminator (appendix E; layer sizes of the reference code)."""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from dpgen.nn.labels import label_maps, one_hot

KERNEL = 5
STRIDE = 2


def same_padding(size: int) -> tuple[int, int]:
    """TF 'SAME' padding of a 5x5 stride-2 conv: output ceil(size / 2), the odd pixel goes after."""
    total = max((math.ceil(size / STRIDE) - 1) * STRIDE + KERNEL - size, 0)
    return total // 2, total - total // 2


def default_channels(in_shape: Sequence[int], num_classes: int) -> tuple[int, ...]:
    """Output channels of the stride-2 convs: reference (C + K, 32 + K), one more 32 + K conv until <= 8 px.

    28 px (MNIST) -> 14 -> 7 and 32 px -> 16 -> 8 use the reference's two convs; 64 px (CelebA) gets a third
    conv (-> 8 px) so the flattened features, and hence the FC layer and the teacher size, stay close to the
    MNIST teacher (about 0.56 M parameters). A 1-d input (tables) has no conv: a conditional MLP.
    """
    if len(in_shape) == 1:
        return ()
    channels, size = [in_shape[0] + num_classes], math.ceil(in_shape[1] / STRIDE)
    while size > 8 or len(channels) < 2:
        channels.append(32 + num_classes)
        size = math.ceil(size / STRIDE)
    return tuple(channels)


def conv_sizes(in_shape: Sequence[int], channels: Sequence[int]) -> list[tuple[int, int]]:
    """Spatial (height, width) entering each conv, then the final one."""
    sizes = [(in_shape[1], in_shape[2])] if channels else []
    for _ in channels:
        h, w = sizes[-1]
        sizes.append((math.ceil(h / STRIDE), math.ceil(w / STRIDE)))
    return sizes


def pad_same(x: torch.Tensor) -> torch.Tensor:
    """Zero-pad the last two dims as TF 'SAME' does for a 5x5 stride-2 conv."""
    top, bottom = same_padding(x.shape[-2])
    left, right = same_padding(x.shape[-1])
    return F.pad(x, (left, right, top, bottom))


def inside_taps(size: int) -> torch.Tensor:
    """(ceil(size / 2), 5) 0/1 matrix: which kernel taps of each output position fall inside the input."""
    before, _ = same_padding(size)
    first = torch.arange(math.ceil(size / STRIDE))[:, None] * STRIDE - before
    row = first + torch.arange(KERNEL)[None, :]
    return ((row >= 0) & (row < size)).float()


def label_map_response(weight: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Output of a 5x5/2 'SAME' conv whose input is an all-ones map in one label channel, for every label.

    weight: (..., out, K, 5, 5), the label channels' kernels. Returns (..., K, out, height', width'): the
    conv of the constant map of class k is the sum of the taps inside the (zero-padded) input, rows x cols,
    so the label part of a conditional conv is a look-up (exact, borders included)."""
    rows, cols = inside_taps(height).to(weight), inside_taps(width).to(weight)
    return torch.einsum("hk,...okl,wl->...ohw", rows, weight, cols).transpose(-4, -3)


class ConditionalDiscriminator(nn.Module):
    """D(x, y) -> logit. The one-hot label y is concatenated to the input and to every hidden layer.

    G-PATE appendix E / reference code (MNIST, K = 10 classes): conv 5x5/2 to C + K channels, LeakyReLU(0.2);
    [y maps] conv 5x5/2 to 32 + K, BatchNorm, LeakyReLU; flatten, [y], linear `hidden` (256), BatchNorm,
    LeakyReLU; [y], linear 1. 555,655 parameters for MNIST. BatchNorm always uses the statistics of the batch
    it is given (TF DCGAN style, no running averages), also in eval mode.

    `hidden=0` (with `channels=[]`: PATE-GAN's teachers of depth 1, its appendix "Hyper-parameter Optimization"):
    no hidden layer, the logit is linear in [x, y] (logistic regression).

    `pool=P` (not in the paper, a dpgen option for images): the image is first average-pooled P x P, and the
    layers above are those of the pooled size. A fixed, public map: the teacher cannot see (nor ask the
    generator to fix) detail finer than P pixels, and costs about P^2 times less.
    """

    def __init__(self, in_shape: Sequence[int], num_classes: int, *, channels: Sequence[int] | None = None,
                 hidden: int = 256, negative_slope: float = 0.2, bn_eps: float = 1e-5, pool: int = 1):
        super().__init__()
        self.in_shape, self.num_classes, self.pool = tuple(in_shape), num_classes, int(pool)
        self.conv_shape = pooled_shape(self.in_shape, self.pool)
        in_shape = self.conv_shape
        self.channels = tuple(default_channels(in_shape, num_classes) if channels is None else channels)
        self.hidden, self.negative_slope, self.bn_eps = hidden, negative_slope, bn_eps
        ins = [in_shape[0]] + list(self.channels[:-1]) if self.channels else []
        self.convs = nn.ModuleList(nn.Conv2d(c + num_classes, out, KERNEL, STRIDE)
                                   for c, out in zip(ins, self.channels))
        self.conv_norms = nn.ModuleList(nn.BatchNorm2d(out, eps=bn_eps, track_running_stats=False)
                                        for out in self.channels[1:])
        h, w = conv_sizes(in_shape, self.channels)[-1] if self.channels else (1, 1)
        features = self.channels[-1] * h * w if self.channels else math.prod(in_shape)
        if hidden:
            self.fc = nn.Linear(features + num_classes, hidden)
            self.fc_norm = nn.BatchNorm1d(hidden, eps=bn_eps, track_running_stats=False)
        self.out = nn.Linear((hidden or features) + num_classes, 1)
        self.reset_parameters()

    def biases_before_batch_norm(self) -> list[str]:
        """The biases a BatchNorm on batch statistics subtracts again (every conv after the first, the hidden FC):
        no output depends on them, so their true gradient is zero and what Adam receives for them is rounding
        noise, turned into steps of size lr of either sign. Kept as the reference has them; comparisons of trained
        weights skip them."""
        return [f"convs.{i}.bias" for i in range(1, len(self.convs))] + (["fc.bias"] if self.hidden else [])

    def reset_parameters(self) -> None:
        """Reference initialisation (TF DCGAN ops): conv weights truncated N(0, 0.02^2) at 2 std, linear weights
        N(0, 0.02^2), biases 0, BatchNorm scale 1 and shift 0."""
        for name, p in self.named_parameters():
            init_parameter(name, p)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x: (b, *in_shape), y: (b,) int64 labels. Returns logits (b,)."""
        onehot = one_hot(y, self.num_classes, x.dtype)
        h = F.avg_pool2d(x, self.pool) if self.pool > 1 else x
        for i, conv in enumerate(self.convs):
            h = torch.cat([h, label_maps(onehot, h.shape[-2], h.shape[-1])], 1)
            h = conv(pad_same(h))
            if i > 0:
                h = self.conv_norms[i - 1](h)
            h = F.leaky_relu(h, self.negative_slope)
        h = torch.cat([h.flatten(1), onehot], 1)
        if self.hidden:
            h = torch.cat([F.leaky_relu(self.fc_norm(self.fc(h)), self.negative_slope), onehot], 1)
        return self.out(h).squeeze(1)


def pooled_shape(in_shape: tuple[int, ...], pool: int) -> tuple[int, ...]:
    """The (C, H / P, W / P) a P x P average pooling makes of an image; P = 1 leaves any shape as it is."""
    if pool == 1:
        return in_shape
    if pool < 1 or len(in_shape) != 3 or in_shape[1] % pool or in_shape[2] % pool:
        raise ValueError(f"pool must be >= 1 and divide the height and width of an image; got pool={pool} "
                         f"for shape {in_shape} (G-PATE: method.module.teachers.pool=1 uses the whole image)")
    return (in_shape[0], in_shape[1] // pool, in_shape[2] // pool)


def init_parameter(name: str, p: torch.Tensor, generator: torch.Generator | None = None) -> None:
    """Initialise one parameter (or a stack of them, teacher dimension first) by its name, as the reference."""
    with torch.no_grad():
        if name.startswith("convs.") and name.endswith("weight"):
            nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04, generator=generator)
        elif "norm" in name and name.endswith("weight"):
            p.fill_(1.0)
        elif name.endswith("weight"):
            p.normal_(0.0, 0.02, generator=generator)
        else:
            p.zero_()
