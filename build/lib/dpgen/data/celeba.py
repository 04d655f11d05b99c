"""CelebA as in G-PATE Sec. 6.1: CelebA-Gender(S) 32x32x3 and (L) 64x64x3 labelled by `Male`;
CelebA-Hair 64x64x3 with classes black / blonde / brown (images with exactly one of those attributes).

Reads the official / torchvision layout (`img_align_celeba/`, `list_attr_celeba.txt`,
`list_eval_partition.txt`) from `<root>/celeba/` or `<root>/`. Official partition: 0 train, 2 test; the
validation images (1) are dropped unless `include_valid_in_train`. Every aligned 178x218 image is center
cropped to `crop` x `crop` (default 178: the full width, 20 rows cut at top and bottom; `crop: null`
resizes the whole image, like the reference code) then resized (bicubic) to `image_size`, once: the result
is a uint8 `.npy` cache in `<celeba>/dpgen_cache/` (2.5 GB at 64x64), memory-mapped afterwards.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from rich.progress import track

from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.data.errors import DataFormatError, DataNotFoundError
from dpgen.data.images import center_crop, open_image, resized, to_array
from dpgen.data.sources import one_line, verify

IMAGES = "img_align_celeba"
ATTRS = "list_attr_celeba.txt"
PARTITION = "list_eval_partition.txt"
# md5 published in torchvision.datasets.CelebA.file_list
CELEBA_MD5 = {ATTRS: "75e246fa4810816ffd6ee81facbd244c", PARTITION: "d32c9cbf5e040fd4025c592c306e6668"}
HAIR = ["Black_Hair", "Blond_Hair", "Brown_Hair"]
TASKS = {"gender": ["female", "male"], "hair": ["black", "blonde", "brown"]}
HOW_TO_GET = ("download img_align_celeba.zip, list_attr_celeba.txt and list_eval_partition.txt from "
              "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html (Google Drive) and unzip them into "
              "<root>/celeba/; or run online with data.download=true (torchvision, needs `pip install gdown`)")


def read_partition(path: Path) -> tuple[list[str], np.ndarray]:
    names, parts = [], []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or fields[1] not in ("0", "1", "2"):
            raise DataFormatError(f"{path}: line {number} should be '<image> <0|1|2>', got {line!r}")
        names.append(fields[0])
        parts.append(int(fields[1]))
    return names, np.array(parts)


def read_attributes(path: Path, names: list[str], wanted: list[str]) -> np.ndarray:
    """(n_images, len(wanted)) array of -1/1, rows in the order of `names`."""
    lines = path.read_text().splitlines()
    if len(lines) < 2:
        raise DataFormatError(f"{path}: expected a count line and an attribute-name line")
    header = lines[1].split()
    absent = [a for a in wanted if a not in header]
    if absent:
        raise DataFormatError(f"{path}: attribute(s) {absent} not in the header {header}")
    columns = [header.index(a) + 1 for a in wanted]
    rows = {}
    for number, line in enumerate(lines[2:], 3):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != len(header) + 1 or any(fields[c] not in ("1", "-1") for c in columns):
            raise DataFormatError(f"{path}: line {number} should be '<image>' and {len(header)} values of 1/-1")
        rows[fields[0]] = [int(fields[c]) for c in columns]
    unlisted = [n for n in names if n not in rows]
    if unlisted:
        raise DataFormatError(f"{path}: no attributes for {len(unlisted)} image(s) of {PARTITION}, e.g. "
                              f"{unlisted[0]}")
    return np.array([rows[n] for n in names], dtype=np.int8).reshape(len(names), len(wanted))


def take(pixels: np.ndarray, idx: np.ndarray) -> torch.Tensor:
    """Rows `idx` of the cache: a view of the memory map when contiguous (the official train and test
    partitions are), a copy otherwise."""
    if len(idx) and idx[-1] - idx[0] + 1 == len(idx):
        return torch.from_numpy(pixels[idx[0]: idx[-1] + 1])
    return torch.from_numpy(np.ascontiguousarray(pixels[idx]))


class CelebADataModule(DPGenDataModule):
    kind = "image"

    def __init__(self, task: str = "gender", image_size: int = 64, crop: int | None = 178,
                 include_valid_in_train: bool = False, check_hashes: bool = True, download: bool = True,
                 cache_dir: str | None = None, name: str = "celeba", **common):
        super().__init__(**common)
        if task not in TASKS:
            raise ValueError(f"CelebA task must be one of {list(TASKS)}, got {task!r}")
        self.name, self.task, self.image_size, self.crop = name, task, int(image_size), crop
        self.include_valid_in_train, self.check_hashes, self.download = include_valid_in_train, check_hashes, download
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else None
        self.class_names = TASKS[task]
        self.num_classes = len(self.class_names)
        self.shape = (3, self.image_size, self.image_size)

    def folder(self) -> Path:
        candidates = [self.root / "celeba", self.root]
        for folder in candidates:
            if (folder / PARTITION).is_file():
                return folder
        looked = [f"{folder}/{PARTITION}" for folder in candidates]
        if self.download:
            error = self.torchvision_download()
            if error is None:
                return self.root / "celeba"
            looked.append(f"download with torchvision.datasets.CelebA into {self.root / 'celeba'}: {error}")
        else:
            looked.append("download: disabled (data.download=false)")
        raise DataNotFoundError("CelebA", PARTITION, looked, HOW_TO_GET.replace("<root>", str(self.root)))

    def torchvision_download(self) -> str | None:
        import torchvision.datasets

        try:
            torchvision.datasets.CelebA(str(self.root), split="all", download=True)
        except Exception as err:  # offline, or gdown missing
            return one_line(err)
        return None

    def lists(self, folder: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Image names and partition (file order), and the attributes the task needs."""
        if not (folder / ATTRS).is_file():
            raise DataNotFoundError("CelebA", ATTRS, [str(folder / ATTRS)], HOW_TO_GET.replace("<root>",
                                                                                                 str(self.root)))
        if self.check_hashes:
            for filename, md5 in CELEBA_MD5.items():
                verify(folder / filename, "md5", md5, " (or, if you trust it, set data.check_hashes=false)")
        names, partition = read_partition(folder / PARTITION)
        attrs = read_attributes(folder / ATTRS, names, HAIR if self.task == "hair" else ["Male"])
        return names, partition, attrs

    def cache_path(self, folder: Path) -> Path:
        crop = f"crop{self.crop}" if self.crop else "nocrop"
        return (self.cache_dir or folder / "dpgen_cache") / f"{IMAGES}_{self.image_size}_{crop}.npy"

    def prepare_data(self) -> None:
        folder = self.folder()
        names, _, _ = self.lists(folder)
        self.ensure_cache(folder, names)

    def ensure_cache(self, folder: Path, names: list[str]) -> Path:
        path = self.cache_path(folder)
        listing = path.with_suffix(".names")
        if path.is_file() and listing.is_file() and listing.read_text().split() == names:
            return path
        images = folder / IMAGES
        present = set(os.listdir(images)) if images.is_dir() else set()
        missing = [n for n in names if n not in present]
        if missing:
            raise DataNotFoundError("CelebA", f"{missing[0]} ({len(missing)} of the {len(names)} listed images "
                                              f"missing)", [str(images)], HOW_TO_GET.replace("<root>", str(self.root)))
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npy")
        side = self.image_size
        out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.uint8, shape=(len(names), 3, side, side))
        for i, name in enumerate(track(names, description=f"CelebA: crop + resize to {side}x{side} (once)")):
            image = open_image(images / name, 3)
            if self.crop:
                image = center_crop(image, int(self.crop), images / name)
            out[i] = to_array(resized(image, side, side))
        out.flush()
        del out
        os.replace(partial, path)  # only a complete cache ever has the final name
        listing.write_text("\n".join(names) + "\n")
        return path

    def load(self) -> tuple[TensorData, TensorData]:
        folder = self.folder()
        names, partition, attrs = self.lists(folder)
        pixels = np.load(self.ensure_cache(folder, names), mmap_mode="c")  # copy-on-write: never written back
        if self.task == "gender":
            labels, keep = (attrs[:, 0] == 1).astype(np.int64), np.ones(len(names), bool)
        else:
            keep = (attrs == 1).sum(1) == 1
            labels = (attrs == 1).argmax(1).astype(np.int64)
        train_parts = [0, 1] if self.include_valid_in_train else [0]
        train = np.flatnonzero(keep & np.isin(partition, train_parts))
        test = np.flatnonzero(keep & (partition == 2))
        for split, idx in (("training", train), ("test", test)):
            if len(idx) == 0:
                raise DataFormatError(f"{folder / PARTITION}: no {split} images for task {self.task!r}")
        return (TensorData(take(pixels, train), torch.from_numpy(labels[train])),
                TensorData(take(pixels, test), torch.from_numpy(labels[test])))
