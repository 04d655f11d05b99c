"""Conditional generators: the DCGAN-style image generator of G-PATE and an MLP generator for tables."""
from __future__ import annotations

import torch
from torch import nn


def one_hot(y: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    return nn.functional.one_hot(y, num_classes).to(dtype)


def concat_label_maps(h: torch.Tensor, y1h: torch.Tensor) -> torch.Tensor:
    """Concatenate the one-hot label as constant feature maps (DCGAN's conv_cond_concat)."""
    maps = y1h[:, :, None, None].expand(-1, -1, h.shape[2], h.shape[3])
    return torch.cat([h, maps], dim=1)


class ConditionalImageGenerator(nn.Module):
    """G-PATE appendix E generator: [z, y] -> FC 1024 -> FC to a small feature map -> 5x5 stride-2
    deconvolutions up to the image, BatchNorm + ReLU, the one-hot label concatenated at every layer,
    sigmoid output in [0, 1]. 28x28 and 32x32 use two deconvolutions, 64x64 three."""

    def __init__(self, shape: tuple[int, int, int], num_classes: int, z_dim: int = 100,
                 fc_dim: int = 1024, start_channels: int = 128, deconv_channels: tuple[int, ...] | None = None):
        super().__init__()
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
        ups, in_ch = [], start_channels
        for out_ch in deconv_channels:
            deconv = nn.ConvTranspose2d(in_ch + c, out_ch, 5, stride=2, padding=2, output_padding=1)
            ups.append(nn.Sequential(deconv, nn.BatchNorm2d(out_ch), nn.ReLU()))
            in_ch = out_ch
        ups.append(nn.ConvTranspose2d(in_ch + c, channels, 5, stride=2, padding=2, output_padding=1))
        self.ups = nn.ModuleList(ups)

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        y1h = one_hot(y, self.num_classes, z.dtype)
        h = self.fc1(torch.cat([z, y1h], 1))
        h = self.fc2(torch.cat([h, y1h], 1)).view(-1, self.start_channels, self.start, self.start)
        for up in self.ups:
            h = up(concat_label_maps(h, y1h))
        return torch.sigmoid(h)


class ConditionalMLP(nn.Module):
    """Fully connected net with the one-hot label concatenated to the input of every layer.

    Used as the tabular generator and discriminator (PATE-GAN section 5: hidden sizes d, d/2, d)."""

    def __init__(self, in_dim: int, out_dim: int, num_classes: int, hidden: tuple[int, ...],
                 activation: str = "relu", out_activation: str | None = None, batch_norm: bool = False):
        super().__init__()
        self.num_classes = num_classes
        acts = {"relu": nn.ReLU, "leaky_relu": lambda: nn.LeakyReLU(0.2), "tanh": nn.Tanh}
        outs = {None: nn.Identity, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}
        dims = [in_dim, *hidden]
        self.hidden = nn.ModuleList(
            nn.Sequential(nn.Linear(a + num_classes, b), *( [nn.BatchNorm1d(b)] if batch_norm else []), acts[activation]())
            for a, b in zip(dims[:-1], dims[1:])
        )
        self.out = nn.Sequential(nn.Linear(dims[-1] + num_classes, out_dim), outs[out_activation]())

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        y1h = one_hot(y, self.num_classes, x.dtype)
        for layer in self.hidden:
            x = layer(torch.cat([x, y1h], 1))
        return self.out(torch.cat([x, y1h], 1))


class ConditionalTableGenerator(ConditionalMLP):
    """[z, y] -> table row in [0, 1]; hidden sizes d, d/2, d of PATE-GAN by default (d = features)."""

    def __init__(self, shape: tuple[int], num_classes: int, z_dim: int = 100, hidden: tuple[int, ...] | None = None):
        (features,) = shape
        hidden = tuple(hidden) if hidden else (features, max(features // 2, 1), features)
        super().__init__(z_dim, features, num_classes, hidden, activation="relu",
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
def generate(net: nn.Module, labels: torch.Tensor, z_dim: int, dist: str = "uniform",
             batch_size: int = 1000) -> torch.Tensor:
    """Records of a conditional generator for the given labels, in eval mode, on the CPU."""
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    xs = [net(latent(len(y), z_dim, dist, device), y.to(device)).cpu() for y in labels.split(batch_size)]
    net.train(was_training)
    return torch.cat(xs) if xs else torch.empty(0)

