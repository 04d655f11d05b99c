"""Probe (issue 86): how much of a DP-MERF table cell's number is the draw of its synthetic records? Scores each
kept or output run's generator (sampled as generate.py samples it, labels as released) on DRAWS sample sets,
seeds 0, 1, ..., with G-PATE appendix E's four classifiers on the real test split, and prints each draw's mean
AUROC and their mean and spread. BN > 0: each draw twice, BatchNorm with the running statistics and with those of
batches of BN records (generate.py sample_batch_norm=BN; the generator trains on batches of 500). Usage:
  python experiments/dpmerf_tables/draws_probe.py DATA N DRAWS BN RUN [RUN ...]"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dpmerf_guide"))
from dpgen.cli.generate import load_release, sample  # noqa: E402
from dpgen.evaluation.downstream import tabular_scores  # noqa: E402
from probe_data import datamodule  # noqa: E402

data, n, draws, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = [Path(r) for r in sys.argv[5:]]
dm = datamodule(data)
tx, ty = dm.test_data[:]
tx, ty = tx.reshape(len(tx), -1).numpy(), ty.numpy()
for run in runs:
    release = load_release(run)
    for bn in [None] + ([batch] if batch > 0 else []):
        release["sample_batch_norm"], aurocs = bn, []
        for seed in range(draws):
            x, y = sample(release, n, seed, 1000)
            aurocs.append(tabular_scores(x.reshape(len(x), -1).numpy(), y.numpy(), tx, ty)["average"]["auroc"])
        mode = "running statistics" if bn is None else f"statistics of batches of {bn}"
        print(f"RESULT {run} (BatchNorm {mode}): AUROC of draws {' '.join(f'{a:.3f}' for a in aurocs)}; "
              f"mean {np.mean(aurocs):.3f}, std {np.std(aurocs):.3f}", flush=True)
