"""A user's images, one sub-folder per class: `<path>/<class>/*.png|jpg`, or `<path>/train/<class>/...` and
`<path>/test/<class>/...` for a fixed split (otherwise a stratified `test_fraction` split by `split_seed`).

Every image must already be `image_size` (an int for square, or [height, width]) unless `resize: true`,
which resizes each image (bicubic, aspect ratio not kept). `channels`: 1 (grayscale) or 3 (RGB).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from rich.progress import track

from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.data.errors import DataConfigError, DataFormatError, DataNotFoundError
from dpgen.data.images import MODES, open_image, resized, to_array
from dpgen.data.split import stratified_split

EXTENSIONS = {".png", ".jpg", ".jpeg"}


def class_folders(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


class ImageFolderDataModule(DPGenDataModule):
    kind = "image"

    def __init__(self, path: str, image_size: int | list[int] = 32, channels: int = 3, resize: bool = False,
                 test_fraction: float = 0.1, split_seed: int = 0, name: str = "image_folder", **common):
        super().__init__(**common)
        if channels not in MODES:
            raise DataConfigError(f"{name}: channels must be 1 or 3, got {channels}")
        height, width = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        self.name, self.channels, self.resize = name, int(channels), bool(resize)
        self.shape = (self.channels, int(height), int(width))
        self.test_fraction, self.split_seed = float(test_fraction), int(split_seed)
        self.folder = self.find(path)
        split = (self.folder / "train").is_dir() and (self.folder / "test").is_dir()
        self.split_folders = [self.folder / "train", self.folder / "test"] if split else [self.folder]
        self.class_names = class_folders(self.split_folders[0])  # folder names: schema, not records
        if not self.class_names:
            raise DataFormatError(f"{self.split_folders[0]}: no class sub-folders (expected <class>/<image files>)")
        self.num_classes = len(self.class_names)

    def find(self, path: str) -> Path:
        given = Path(path).expanduser()
        candidates = [given] if given.is_absolute() else [Path.cwd() / given, self.root / given]
        for folder in candidates:
            if folder.is_dir():
                return folder
        raise DataNotFoundError(self.name, f"folder {given}", [str(c) for c in candidates],
                                "set data.path to a folder with one sub-folder of images per class")

    def files(self, folder: Path) -> tuple[list[Path], list[int]]:
        files, labels = [], []
        for label, cls in enumerate(self.class_names):
            found = sorted(p for p in (folder / cls).glob("*") if p.suffix.lower() in EXTENSIONS)
            if not found:
                raise DataNotFoundError(self.name, f"images of class {cls!r}", [str(folder / cls)],
                                        f"put .png/.jpg files of class {cls!r} there or remove the folder")
            files += found
            labels += [label] * len(found)
        return files, labels

    def read(self, folder: Path) -> TensorData:
        files, labels = self.files(folder)
        _, height, width = self.shape
        pixels = np.empty((len(files), *self.shape), dtype=np.uint8)
        for i, file in enumerate(track(files, description=f"{self.name}: reading {folder}")):
            image = open_image(file, self.channels)
            if image.size != (width, height):
                if not self.resize:
                    raise DataFormatError(
                        f"{file} is {image.size[0]}x{image.size[1]} (width x height) but data.image_size is "
                        f"{width}x{height}: all images must have that size, or set data.resize=true")
                image = resized(image, height, width)
            pixels[i] = to_array(image)
        return TensorData(torch.from_numpy(pixels), torch.tensor(labels))

    def load(self) -> tuple[TensorData, TensorData]:
        if len(self.split_folders) == 2:
            return self.read(self.split_folders[0]), self.read(self.split_folders[1])
        data = self.read(self.folder)
        train, test = stratified_split(data.y, self.test_fraction, self.split_seed)
        return data.subset(train), data.subset(test)
