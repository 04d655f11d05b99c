"""Conditional generators: the DCGAN-style image generator of G-PATE and an MLP generator for tables."""
from __future__ import annotations

import copy

import torch
from torch import nn

from dpgen.nn.fc import ConditionalMLP, table_hidden
from dpgen.nn.labels import concat_label_maps, one_hot


class ConditionalImageGenerator(nn.Module):
    """G-PATE appendix E generator: [z, y] -> FC 1024 -> FC to a small feature map -> 5x5 stride-2
    deconvolutions up to the image, BatchNorm + ReLU, the one-hot label concatenated at every layer,
    sigmoid output in [0, 1]. 28x28 and 32x32 use two deconvolutions, 64x64 three.

    `init="dcgan"`: the reference G-PATE code's initialisation (its DCGAN ops: linear and deconvolution weights
    N(0, 0.02^2), biases 0; BatchNorm scale 1, shift 0), so the first samples are flat grey instead of
    PyTorch's default-init contrast. `init="torch"`: PyTorch's defaults.

    `align="tf"`: each 5x5 stride-2 deconvolution places its output as TensorFlow's `conv2d_transpose` with
    padding SAME (the reference code's): the adjoint of a convolution padded 1 before and 2 after, i.e. a
    transposed convolution with padding 1 cropped to 2n. `align="torch"`: padding 2 with output_padding 1, the
    same taps shifted by one pixel (output pixel y here is pixel y + 1 there)."""

    def __init__(self, shape: tuple[int, int, int], num_classes: int, z_dim: int = 100,
                 fc_dim: int = 1024, start_channels: int = 128, deconv_channels: tuple[int, ...] | None = None,
                 init: str = "torch", align: str = "torch"):
        super().__init__()
        if align not in ("torch", "tf"):
            raise ValueError(f"unknown deconvolution alignment {align!r} (torch or tf)")
        channels, height, width = shape
        if height != width:
            raise ValueError(f"square images only, got {height}x{width}")
        self.shape, self.num_classes, self.z_dim = tuple(shape), num_classes, z_dim
        if deconv_channels is None:  # reference G-PATE: one 128-channel deconv before the image at 28x28
            deconv_channels = (128,) if height <= 32 else (128, 64)
        n_up = len(deconv_channels) + 1
        if height % 2**n_up:
            raise ValueError(f"image size {height} is not divisible by {2**n_up}")
        self.start, self.start_channels = height // 2**n_up, start_channels
        c = num_classes
        self.fc1 = nn.Sequential(nn.Linear(z_dim + c, fc_dim), nn.BatchNorm1d(fc_dim), nn.ReLU())
        n_start = start_channels * self.start**2
        self.fc2 = nn.Sequential(nn.Linear(fc_dim + c, n_start), nn.BatchNorm1d(n_start), nn.ReLU())
        ups, in_ch, size = [], start_channels, self.start
        for out_ch in deconv_channels:
            size *= 2
            ups.append(nn.Sequential(*deconv(in_ch + c, out_ch, size, align), nn.BatchNorm2d(out_ch), nn.ReLU()))
            in_ch = out_ch
        last = deconv(in_ch + c, channels, size * 2, align)
        ups.append(last[0] if len(last) == 1 else nn.Sequential(*last))
        self.ups = nn.ModuleList(ups)
        if init == "dcgan":
            dcgan_init(self)
        elif init != "torch":
            raise ValueError(f"unknown generator init {init!r} (dcgan or torch)")

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        y1h = one_hot(y, self.num_classes, z.dtype)
        h = self.fc1(torch.cat([z, y1h], 1))
        h = self.fc2(torch.cat([h, y1h], 1)).view(-1, self.start_channels, self.start, self.start)
        for up in self.ups:
            h = up(concat_label_maps(h, y1h))
        return torch.sigmoid(h)


class Crop(nn.Module):
    """Keeps the top-left size x size pixels."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., :self.size, :self.size]


def deconv(in_ch: int, out_ch: int, size: int, align: str) -> list[nn.Module]:
    """A 5x5 stride-2 transposed convolution to size x size, aligned as PyTorch ("torch") or TF SAME ("tf")."""
    if align == "tf":
        return [nn.ConvTranspose2d(in_ch, out_ch, 5, stride=2, padding=1), Crop(size)]
    return [nn.ConvTranspose2d(in_ch, out_ch, 5, stride=2, padding=2, output_padding=1)]


def dcgan_init(net: nn.Module, std: float = 0.02) -> None:
    """Weights of linear and (transposed) convolution layers N(0, std^2), biases 0; BatchNorm scale 1, shift 0."""
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.Linear, nn.ConvTranspose2d, nn.Conv2d)):
                m.weight.normal_(0.0, std)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.reset_parameters()


class ConditionalTableGenerator(ConditionalMLP):
    """[z, y] -> table row in [0, 1]; hidden sizes d, d/2, d of PATE-GAN by default (d = features)."""

    def __init__(self, shape: tuple[int], num_classes: int, z_dim: int = 100, hidden: tuple[int, ...] | None = None):
        (features,) = shape
        super().__init__(z_dim, features, num_classes, tuple(hidden) if hidden else table_hidden(features), "relu",
                         out_activation="sigmoid", batch_norm=True)
        self.shape, self.z_dim = tuple(shape), z_dim


def latent(n: int, z_dim: int, dist: str = "uniform", device=None) -> torch.Tensor:
    """Generator input noise: "uniform" U(-1, 1) (the reference DCGAN code) or "normal" N(0, 1)."""
    if dist == "uniform":
        return torch.rand(n, z_dim, device=device) * 2 - 1
    if dist == "normal":
        return torch.randn(n, z_dim, device=device)
    raise ValueError(f"unknown latent distribution {dist!r} (uniform or normal)")


@torch.no_grad()
def label_pool(net: nn.Module, z: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(b, K, *shape): entry (j, c) is net(z_j, c), from ONE forward pass (its BatchNorm batch is the b x K pool).
    Label-matched fakes: teacher t's fake j is pool[j, y_tj] (`TeacherEnsemble.train_step(..., by_label=True)`)."""
    b = len(z)
    classes = torch.arange(num_classes, device=z.device)
    pool = net(z.repeat_interleave(num_classes, 0), classes.repeat(b))
    return pool.view(b, num_classes, *pool.shape[1:])


@torch.no_grad()
def generate(net: nn.Module, labels: torch.Tensor, z_dim: int, dist: str = "uniform",
             batch_size: int = 1000, batch_norm_batch: int | None = None) -> torch.Tensor:
    """Records of a conditional generator for the given labels, on the CPU. BatchNorm uses the running statistics
    (eval mode), or with `batch_norm_batch = b` the statistics of each batch of b samples (training mode, as the
    reference G-PATE code samples; `net` itself, running statistics included, is left unchanged)."""
    was_training = net.training
    if batch_norm_batch is None:
        net.eval()
    else:
        net, batch_size = copy.deepcopy(net).train(), int(batch_norm_batch)
    device = next(net.parameters()).device
    xs = [net(latent(len(y), z_dim, dist, device), y.to(device)).cpu() for y in labels.split(batch_size)]
    net.train(was_training)
    return torch.cat(xs) if xs else torch.empty(0)
