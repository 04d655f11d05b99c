"""Probe (issue 86): DP-SGD logistic regression as HI's guide at eps = 10 (half the budget), a grid of its settings, scored by
AUROC on a held-out fifth of the training split (and on the real test split, for reference).
Usage: PYTHONPATH=experiments/dpmerf_guide:experiments/dpmerf_tables python experiments/dpmerf_tables/dp_logistic_guide_probe.py DATA EPS"""
import itertools
import sys

import torch
from sklearn.metrics import roc_auc_score
from torch import nn

from dpgen.aggregation.mean_embedding import sensitivity
from dpgen.methods.guide import train_dpsgd
from dpgen.privacy import two_stage
from held_out import held_out_split

data, eps = sys.argv[1], float(sys.argv[2])
(tx, ty), (fx, fy), (vx, vy), (sx, sy) = held_out_split(data)
for epochs, batch, lr, clip in itertools.product([20, 60, 150], [512, 2048], [0.5, 2, 8], [1.0]):
    plan = two_stage.plan(eps, 1e-5, sensitivity(0.2), 0.5, batch, epochs, len(tx))
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(tx.shape[1], 2))
    train_dpsgd(net, fx, fy, steps=plan["steps"], batch_size=batch, lr=lr, momentum=0.9, clip=clip,
                noise_multiplier=plan["noise_multiplier"])
    with torch.no_grad():
        v = roc_auc_score(vy.numpy(), net(vx).softmax(1)[:, 1].numpy())
        t = roc_auc_score(sy.numpy(), net(sx).softmax(1)[:, 1].numpy())
    print(f"epochs {epochs} batch {batch} lr {lr} clip {clip} steps {plan['steps']} noise "
          f"{plan['noise_multiplier']:.3f}: val {v:.4f} test {t:.4f}", flush=True)
