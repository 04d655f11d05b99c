"""Probe (issue 86): does a mixture of DP-MERF generators score above its members on a real table? Samples each
kept or output run's generator (as generate.py does, labels as released), scores each alone and their pooled
samples (an equal share from each) with G-PATE appendix E's four classifiers on the real test split. Usage:
  python experiments/dpmerf_tables/pool_probe.py DATA N RUN [RUN ...]"""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dpmerf_guide"))
from dpgen.cli.generate import load_release, sample  # noqa: E402
from dpgen.evaluation.downstream import tabular_scores  # noqa: E402
from probe_data import datamodule  # noqa: E402

data, n, runs = sys.argv[1], int(sys.argv[2]), [Path(r) for r in sys.argv[3:]]
dm = datamodule(data)
sx, sy = dm.test_data[:]
sx, sy = sx.reshape(len(sx), -1).numpy(), sy.numpy()
xs, ys = [], []
for i, run in enumerate(runs):
    x, y = sample(load_release(run), n, i, 1000)
    xs.append(x.reshape(len(x), -1).numpy()), ys.append(y.numpy())
    s = tabular_scores(xs[-1], ys[-1], sx, sy)["average"]
    print(f"RESULT {run}: AUROC {s['auroc']:.3f} AUPRC {s['auprc']:.3f} ({n} samples)", flush=True)
share = n // len(runs)
x = np.concatenate([x[:share] for x in xs])
y = np.concatenate([y[:share] for y in ys])
s = tabular_scores(x, y, sx, sy)["average"]
print(f"RESULT pooled {len(runs)} runs: AUROC {s['auroc']:.3f} AUPRC {s['auprc']:.3f} ({len(x)} samples)", flush=True)
