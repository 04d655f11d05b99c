"""The real training records, each cut to the k x k lowest frequencies of its 2-D DCT (clipped to [0, 1]), written as
a synthetic data set for evaluate.py: what a perfect generator of the basis generator's subspace
(`generator.basis_size=k`, nn/generator.py) could at best give the downstream classifier. Not private: a ceiling.

    python experiments/low_pass_records.py K DATA OUT.npz [--grid GRID.png]
    python evaluate.py synthetic=OUT.npz data=DATA '~eval.callbacks.image_quality'
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from scipy.fft import dctn, idctn
from torchvision.utils import save_image

from dpgen.cli.common import CONF_DIR


def low_pass(x: np.ndarray, k: int) -> np.ndarray:
    """(n, c, h, w) images with every DCT coefficient outside the k x k lowest frequencies set to 0, clipped to [0, 1]."""
    coefficients = dctn(x, axes=(-2, -1), norm="ortho")
    coefficients[..., k:, :] = 0
    coefficients[..., :, k:] = 0
    return np.clip(idctn(coefficients, axes=(-2, -1), norm="ortho"), 0, 1).astype(np.float32)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("k", type=int)
    parser.add_argument("data")
    parser.add_argument("out", type=Path)
    parser.add_argument("--grid", type=Path, help="also a picture: ten cut records of each class, one class per column")
    args = parser.parse_args(argv)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"data={args.data}"])
    dm = instantiate(cfg.data, batch_size=256, seed=cfg.seed)
    dm.prepare_data()
    dm.setup("fit")
    x, y = dm.train_data.x.numpy(), dm.train_data.y.numpy()
    cut = low_pass(x, args.k)
    print(f"{len(x)} records, mean squared change per pixel {((cut - x) ** 2).mean():.4f}")
    np.savez(args.out, x=cut, y=y)
    if args.grid:
        classes = np.unique(y)
        rows = [[np.flatnonzero(y == c)[i] for c in classes] for i in range(10)]
        save_image(torch.as_tensor(cut[np.ravel(rows)]), args.grid, nrow=len(classes), padding=2, pad_value=1.0)


if __name__ == "__main__":
    main()
