"""Probe (issue 86): how far would a guide lift DP-MERF on a real table? Samples a kept run's generator, then
scores the synthetic records as released and relabelled by classifiers of the real training split (an upper bound
for a DP-SGD guide). Usage: python experiments/dpmerf_guide/table_probe.py docs/results/dpmerf_hi_control [data]"""
import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier

from dpgen.cli.generate import load_release, sample
from dpgen.evaluation.downstream import tabular_scores
from probe_data import datamodule  # noqa: E402 (this folder's)

run, data = Path(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "hi")
dm = datamodule(data)
tx, ty = dm.train_data[:]
sx, sy = dm.test_data[:]
release = load_release(run)
x, y = sample(release, len(tx), 0, 1000)
x, y = x.reshape(len(x), -1).numpy(), y.numpy()
tx, ty, sx, sy = tx.reshape(len(tx), -1).numpy(), ty.numpy(), sx.reshape(len(sx), -1).numpy(), sy.numpy()
rng = np.random.default_rng(0)


def show(name, labels):
    s = tabular_scores(x, labels, sx, sy)["average"]
    print(f"{name:40s} AUROC {s['auroc']:.3f} AUPRC {s['auprc']:.3f} positives {labels.mean():.3f}", flush=True)


print("real positives", ty.mean())
show("as released", y)
for gname, guide in [("lr", LogisticRegression(max_iter=2000)),
                     ("mlp", MLPClassifier((32,), max_iter=500, random_state=0))]:
    guide.fit(tx, ty)
    p = guide.predict_proba(x)[:, 1]
    from sklearn.metrics import roc_auc_score
    print(gname, "guide AUROC on real test", round(roc_auc_score(sy, guide.predict_proba(sx)[:, 1]), 3))
    show(f"relabel hard by {gname}", (p > 0.5).astype(int))
    show(f"relabel sampled by {gname}", (rng.random(len(p)) < p).astype(int))
