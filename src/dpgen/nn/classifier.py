"""Image classifiers used to evaluate synthetic data.

`CNNClassifier` is the downstream CNN of G-PATE appendix E ("two convolutional layers with
32 and 64 kernels respectively ... ReLU ... dropout on all layers"). The same module with
no dropout on the convolutions and a wider head serves as the domain classifier of
appendix F (the feature extractor for IS / FID): see `domain_classifier`. `reference_script_cnn` is the CNN of
the reference G-PATE code's evaluation script, which differs from the paper's description; `ptg_cnn` is
PATE-TripleGAN's evaluation CNN as its paper describes it.
"""

from __future__ import annotations

import torch
from torch import nn


class CNNClassifier(nn.Module):
    """conv(32) -> ReLU -> pool -> dropout -> conv(64) -> ReLU -> pool -> dropout -> fc(hidden) -> ReLU -> dropout -> fc.

    `features(x)` returns the penultimate activations (after the hidden layer), `forward(x)` the logits.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        image_size: int | tuple[int, int],
        channels: tuple[int, int] = (32, 64),
        hidden: int = 128,
        dropout: float = 0.25,
        conv_dropout: float | None = None,
    ):
        super().__init__()
        height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
        conv_dropout = dropout if conv_dropout is None else conv_dropout
        self.config = dict(
            in_channels=in_channels,
            num_classes=num_classes,
            image_size=(height, width),
            channels=tuple(channels),
            hidden=hidden,
            dropout=dropout,
            conv_dropout=conv_dropout,
        )
        first, second = channels
        # G-PATE appendix E: two conv layers with 32 and 64 kernels, ReLU, dropout on all layers.
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, first, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(conv_dropout),
            nn.Conv2d(first, second, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(conv_dropout),
            nn.Flatten(),
            nn.Linear(second * (height // 4) * (width // 4), hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
        )
        self.head = nn.Linear(hidden, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def downstream_cnn(in_channels: int, num_classes: int, image_size: int | tuple[int, int]) -> CNNClassifier:
    """The appendix E evaluation CNN: dropout 0.25 after each conv block and 0.5 before the output layer."""
    return CNNClassifier(in_channels, num_classes, image_size, hidden=128, dropout=0.5, conv_dropout=0.25)


def domain_classifier(in_channels: int, num_classes: int, image_size: int | tuple[int, int],
                      channels: tuple[int, int] = (32, 64)) -> CNNClassifier:
    """The appendix F domain classifier (a CNN trained on real data); its 256 hidden units are the FID features."""
    return CNNClassifier(in_channels, num_classes, image_size, channels=channels, hidden=256, dropout=0.3,
                         conv_dropout=0.0)


class KerasDropout(nn.Dropout):
    """Dropout as Keras draws it (TensorFlow's nn.dropout): keep an element where a uniform draw is at least p, and
    scale the kept by 1 / (1 - p). torch.rand is about 2.8 times faster than nn.Dropout's bernoulli_ on a CPU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return x * (torch.rand_like(x) >= self.p).to(x.dtype).div_(1 - self.p)


def reference_script_cnn(in_channels: int, num_classes: int, image_size: int | tuple[int, int]) -> nn.Sequential:
    """The CNN of the reference G-PATE code's evaluation script (evaluation/train-classifier-mnist.py there, Keras):
    conv 32 3x3 (no padding) -> ReLU -> max-pool 2 -> dropout 0.2 -> conv 64 3x3 (no padding) -> ReLU -> dropout
    0.25 -> dense 64 -> ReLU -> dense, with Keras' Glorot-uniform weights and zero biases. Returns logits."""
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    features = 64 * ((height - 2) // 2 - 2) * ((width - 2) // 2 - 2)
    # max-pool before ReLU: the same function and gradients (ReLU is monotone), on a quarter of the elements
    model = nn.Sequential(
        nn.Conv2d(in_channels, 32, kernel_size=3), nn.MaxPool2d(2), nn.ReLU(), KerasDropout(0.2),
        nn.Conv2d(32, 64, kernel_size=3), nn.ReLU(), KerasDropout(0.25), nn.Flatten(),
        nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, num_classes),
    )
    for layer in model:
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    return model


def ptg_cnn(in_channels: int, num_classes: int, image_size: int | tuple[int, int],
            channels: tuple[int, int, int] = (32, 64, 128), hidden: int = 128) -> nn.Sequential:
    """PATE-TripleGAN's evaluation CNN, "OurCNN", as its paper describes it (Section 5.1: three convolutional layers,
    each followed by ReLU and max-pooling, then two fully connected layers, the last with one unit a class). The
    paper gives no sizes and its code is not public: the 3x3 kernels with padding 1, the pools of 2, `channels` and
    `hidden` are dpgen's choice, and PyTorch's default initialisation. Returns logits."""
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    layers, previous = [], in_channels
    for width_out in channels:
        layers += [nn.Conv2d(previous, width_out, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        previous, height, width = width_out, height // 2, width // 2
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(previous * height * width, hidden), nn.ReLU(),
                         nn.Linear(hidden, num_classes))
