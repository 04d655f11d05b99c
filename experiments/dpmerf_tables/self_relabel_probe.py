"""Probe (issue 86): a kept table run's synthetic records relabelled by a classifier fitted on those same records (post-
processing, no privacy cost), scored by the four classifiers. Usage (from the repository root):
PYTHONPATH=experiments/dpmerf_guide python experiments/dpmerf_tables/self_relabel_probe.py RUN DATA [SEED]"""
import sys
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from dpgen.cli.generate import load_release, sample
from dpgen.evaluation.downstream import tabular_scores
from probe_data import datamodule

run, data = Path(sys.argv[1]), sys.argv[2]
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
dm = datamodule(data)
tx, ty = dm.train_data[:]
sx, sy = dm.test_data[:]
sx, sy = sx.reshape(len(sx), -1).numpy(), sy.numpy()
release = load_release(run)
x, y = sample(release, len(tx), seed, 1000)
x, y = x.reshape(len(x), -1).numpy(), y.numpy()
rng = np.random.default_rng(seed)


def show(name, labels):
    s = tabular_scores(x, labels, sx, sy)
    per = " ".join(f"{k} {v['auroc']:.3f}" for k, v in s.items() if k != "average")
    print(f"{run.name} seed {seed} {name:28s} AUROC {s['average']['auroc']:.4f} AUPRC {s['average']['auprc']:.4f} "
          f"positives {labels.mean():.3f} ({per})", flush=True)


show("as released", y)
lr = LogisticRegression(max_iter=3000).fit(x, y)
p = lr.predict_proba(x)[:, 1]
print("self LR on real test", round(roc_auc_score(sy, lr.predict_proba(sx)[:, 1]), 4))
show("self LR hard", (p > 0.5).astype(int))
show("self LR sampled", (rng.random(len(p)) < p).astype(int))
prior = float(release["class_probs"][1])
show("self LR top released share", (p >= np.quantile(p, 1 - prior)).astype(int))
