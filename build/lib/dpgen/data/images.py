"""Reading one image file into a uint8 (C, H, W) array, with the error messages users need."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from dpgen.data.errors import DataFormatError

MODES = {1: "L", 3: "RGB"}


def open_image(path: Path, channels: int) -> Image.Image:
    try:
        with Image.open(path) as image:
            return image.convert(MODES[channels])
    except (UnidentifiedImageError, OSError) as err:
        raise DataFormatError(f"{path}: cannot read this image ({err})") from err


def center_crop(image: Image.Image, side: int, path: Path) -> Image.Image:
    width, height = image.size
    if width < side or height < side:
        raise DataFormatError(f"{path} is {width}x{height}, smaller than the {side}x{side} crop")
    left, top = (width - side) // 2, (height - side) // 2
    return image.crop((left, top, left + side, top + side))


def to_array(image: Image.Image) -> np.ndarray:
    pixels = np.asarray(image, dtype=np.uint8)
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)


def resized(image: Image.Image, height: int, width: int) -> Image.Image:
    return image.resize((width, height), Image.Resampling.BICUBIC)  # PIL's bicubic filter is antialiased
