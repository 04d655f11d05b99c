"""Test data in the official layouts, written into a given folder: a tiny CelebA, a tiny creditcard.csv,
IDX files, image folders. Plain functions, so other test folders can use them too (tests/cli)."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpgen.data.errors import DataNotFoundError

CELEBA_ATTRIBUTES = (
    "5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose Black_Hair "
    "Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee Gray_Hair Heavy_Makeup "
    "High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard Oval_Face Pale_Skin Pointy_Nose "
    "Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair Wavy_Hair Wearing_Earrings Wearing_Hat "
    "Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young").split()

# (partition, Male, hair attributes set to 1) of images 000001.jpg ... 000010.jpg
CELEBA_IMAGES = [
    (0, 1, ["Black_Hair"]), (0, -1, ["Blond_Hair"]), (0, 1, ["Brown_Hair"]),
    (0, -1, ["Black_Hair", "Blond_Hair"]), (0, 1, []), (0, -1, ["Brown_Hair"]),
    (1, 1, ["Black_Hair"]),
    (2, -1, ["Blond_Hair"]), (2, 1, ["Brown_Hair"]), (2, -1, ["Black_Hair", "Brown_Hair"]),
]


def celeba_color(i: int) -> tuple[int, int, int]:
    """Face colour of image i (0-based): distinct per image, so the tests can tell images apart."""
    return (20 + 20 * i, 230 - 20 * i, 100)


def write_celeba(folder: Path) -> Path:
    """<folder>/celeba in the torchvision/official layout. Each 178x218 image is its colour except
    20 white rows at the top and at the bottom (exactly what the 178x178 center crop removes)."""
    celeba = folder / "celeba"
    (celeba / "img_align_celeba").mkdir(parents=True)
    names = [f"{i + 1:06d}.jpg" for i in range(len(CELEBA_IMAGES))]
    attr_lines = [str(len(names)), " ".join(CELEBA_ATTRIBUTES) + " "]
    partition_lines = []
    for i, (name, (part, male, hair)) in enumerate(zip(names, CELEBA_IMAGES)):
        pixels = np.full((218, 178, 3), celeba_color(i), np.uint8)
        pixels[:20] = pixels[-20:] = 255
        Image.fromarray(pixels).save(celeba / "img_align_celeba" / name, quality=95)
        values = [male if a == "Male" else (1 if a in hair else -1) for a in CELEBA_ATTRIBUTES]
        attr_lines.append(name + "".join(f"{v:3d}" for v in values))
        partition_lines.append(f"{name} {part}")
    (celeba / "list_attr_celeba.txt").write_text("\n".join(attr_lines) + "\n")
    (celeba / "list_eval_partition.txt").write_text("\n".join(partition_lines) + "\n")
    return celeba


CREDIT_COLUMNS = ["Time"] + [f"V{i}" for i in range(1, 29)] + ["Amount", "Class"]


def credit_row(r: int) -> list[float]:
    """Row r of the fixture: V1 = (r - 25) / 2, V2..V28 = 0.1 * j, Amount = 100 r, fraud when r % 5 == 0."""
    return [10.0 * r, (r - 25) / 2] + [0.1 * j for j in range(2, 29)] + [100.0 * r, int(r % 5 == 0)]


def write_credit(folder: Path, rows: int = 50) -> Path:
    """creditcard.csv as Kaggle ships it: quoted header and quoted Class values."""
    lines = [",".join(f'"{c}"' for c in CREDIT_COLUMNS)]
    for r in range(rows):
        *values, label = credit_row(r)
        lines.append(",".join(repr(v) for v in values) + f',"{label}"')
    path = folder / "creditcard.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def idx_file(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + np.array(array.shape, ">i4").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def image_folder(folder: Path, sizes: dict[str, list[tuple[int, int]]]) -> None:
    """<folder>/<class>/<k>.png, RGB, image k of class c filled with value 10 * (c_index * 10 + k)."""
    for c, (cls, shapes) in enumerate(sorted(sizes.items())):
        (folder / cls).mkdir(parents=True)
        for k, (height, width) in enumerate(shapes):
            value = 10 * (c * 10 + k)
            Image.fromarray(np.full((height, width, 3), value, np.uint8)).save(folder / cls / f"{k}.png")


def write_image_folder(folder: Path, size: tuple[int, int] = (28, 28), per_class: int = 8,
                       classes: tuple[str, ...] = ("a", "b")) -> Path:
    """<folder>/<class>/<k>.png, all of `size` (height, width): a smaller form of `image_folder`."""
    image_folder(folder, {c: [tuple(size)] * per_class for c in classes})
    return folder


def installed_or_skip(datamodule_class, root: Path):
    """The datamodule set up from this machine's local install (`root`: a folder without the data), else skip."""
    dm = datamodule_class(root=str(root), download=False)
    try:
        dm.setup()
    except DataNotFoundError:
        pytest.skip(f"{datamodule_class.__name__}: no local install on this machine")
    return dm
