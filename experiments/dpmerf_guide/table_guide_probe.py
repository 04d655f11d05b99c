"""Probe (issue 86): a DP-SGD guide for a table. Trains a small tanh MLP (or logistic regression, hidden=0) with
DP-SGD at the noise two_stage.plan gives a guided eps run, reports its test AUROC and the downstream score of a
kept run's samples relabelled by it. Usage:
python experiments/dpmerf_guide/table_guide_probe.py RUN DATA EPS HIDDEN EPOCHS LR CLIP BATCH"""
import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import nn

from dpgen.aggregation.mean_embedding import sensitivity
from dpgen.cli.generate import load_release, sample
from dpgen.evaluation.downstream import tabular_scores
from dpgen.methods.guide import train_dpsgd
from dpgen.privacy import two_stage
from probe_data import datamodule  # noqa: E402 (this folder's)

run, data, eps = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
hidden, epochs, lr, clip, batch = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8])
dm = datamodule(data)
tx, ty = dm.train_data[:]
sx, sy = dm.test_data[:]
tx, sx = tx.reshape(len(tx), -1).float(), sx.reshape(len(sx), -1).float()
plan = two_stage.plan(eps, 1e-5, sensitivity(0.2), 0.5, batch, epochs, len(tx))
print({k: round(v, 4) for k, v in plan.items()})
torch.manual_seed(0)
f = tx.shape[1]
net = (nn.Sequential(nn.Linear(f, hidden), nn.Tanh(), nn.Linear(hidden, 2)) if hidden
       else nn.Sequential(nn.Linear(f, 2)))
train_dpsgd(net, tx, ty, steps=plan["steps"], batch_size=batch, lr=lr, momentum=0.9, clip=clip,
            noise_multiplier=plan["noise_multiplier"])
with torch.no_grad():
    auroc = roc_auc_score(sy.numpy(), net(sx).softmax(1)[:, 1].numpy())
release = load_release(run)
x, _ = sample(release, len(tx), 0, 1000)
x = x.reshape(len(x), -1)
with torch.no_grad():
    probs = net(x).softmax(1)
prior = float(release["class_probs"][1])  # the released share of class 1
ranked = (probs[:, 1] >= probs[:, 1].quantile(1 - prior)).long().numpy()
for how, y in (("argmax", probs.argmax(1).numpy()), ("sampled", torch.multinomial(probs, 1).squeeze(1).numpy()),
               ("top released share", ranked)):
    s = tabular_scores(x.numpy(), y, sx.numpy(), sy.numpy())["average"]
    print(f"RESULT hidden {hidden} epochs {epochs} lr {lr} clip {clip} batch {batch}: guide AUROC {auroc:.3f}; "
          f"samples relabelled by {how}: AUROC {s['auroc']:.3f} AUPRC {s['auprc']:.3f} positives {y.mean():.3f} "
          f"(real {ty.float().mean():.3f})", flush=True)
