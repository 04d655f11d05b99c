"""The real training split of a table with every continuous column moved by Gaussian noise of standard deviation
`scale` bins of the marginal features' resolution (its public range / `bins`), clipped to the range, written as
a synthetic CSV for evaluate.py: what records that are exact up to the soft bins' width, the resolution at which
DP-MERF's marginal features (aggregation/feature_maps.py MarginalFeatures) see a continuous column, could at best
give the downstream classifiers. Not private: a ceiling.

    python experiments/blurred_records.py DATA SCALE OUT.csv [--bins 10] [--seed 0]
    python evaluate.py synthetic=OUT.csv data=DATA '~eval.callbacks.image_quality' \
        eval.callbacks.downstream.tabular_models=gpate out=OUT.json
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from hydra.utils import instantiate
from omegaconf import OmegaConf

from dpgen.cli.common import CONF_DIR


def blurred(frame: pd.DataFrame, ranges: dict, scale: float, bins: int, seed: int) -> pd.DataFrame:
    """`frame` with each column of `ranges` plus N(0, (scale (high - low) / bins)^2), clipped to [low, high]."""
    rng = np.random.default_rng(seed)
    out = frame.copy()
    for column, (low, high) in ranges.items():
        noise = rng.normal(0.0, scale * (high - low) / bins, len(out))
        out[column] = np.clip(out[column].to_numpy(dtype=np.float64) + noise, low, high)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="a table's data config (conf/data/<data>.yaml) with public ranges, e.g. hi")
    parser.add_argument("scale", type=float, help="the noise's standard deviation, in bins")
    parser.add_argument("out", type=Path)
    parser.add_argument("--bins", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = OmegaConf.load(CONF_DIR / "data" / f"{args.data}.yaml")
    data = instantiate(cfg)  # the datamodule finds the file and reads the public ranges as training does
    if data.scaling != "public":
        raise SystemExit(f"error: data={args.data} gives no public ranges for its continuous columns")
    frame = pd.read_csv(data.csv_file(cfg.path))
    ranges = {column: (float(low), float(high)) for column, low, high in zip(data.continuous, data.low, data.high)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    blurred(frame, ranges, args.scale, args.bins, args.seed).to_csv(args.out, index=False)
    print(f"{len(frame)} records of {args.data}, continuous columns blurred by {args.scale} bins -> {args.out}")


if __name__ == "__main__":
    main()
