"""Probe (issue 86): DP-SGD logistic regression as a table's guide, warm-started from a logistic regression fitted on the
kept run's own synthetic records (post-processing of its release, no privacy cost); AUROC on a held-out fifth of
the training split and on the test split. Usage:
PYTHONPATH=experiments/dpmerf_guide:experiments/dpmerf_tables python experiments/dpmerf_tables/dp_logistic_warm_probe.py RUN DATA EPS SHARE"""
import itertools
import sys
from pathlib import Path

import numpy as np
import torch
from opacus import GradSampleModule
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from torch import nn

from dpgen.aggregation.mean_embedding import sensitivity
from dpgen.cli.generate import load_release, sample
from dpgen.methods import guide as guide_mod
from dpgen.privacy import two_stage
from held_out import held_out_split

run, data, eps, share = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
(tx, ty), (fx, fy), (vx, vy), (sx, sy) = held_out_split(data)
release = load_release(run)
x, y = sample(release, len(tx), 0, 1000)
synth = LogisticRegression(max_iter=3000).fit(x.reshape(len(x), -1).numpy(), y.numpy())


def auroc(net, x, y):
    with torch.no_grad():
        return roc_auc_score(y.numpy(), net(x).softmax(1)[:, 1].numpy())


def warm_net():
    net = nn.Sequential(nn.Linear(tx.shape[1], 2))
    with torch.no_grad():  # two logits whose difference is the fitted one
        w = torch.tensor(synth.coef_[0], dtype=torch.float32)
        b = float(synth.intercept_[0])
        net[0].weight.copy_(torch.stack([-w / 2, w / 2]))
        net[0].bias.copy_(torch.tensor([-b / 2, b / 2]))
    return net


print(f"synthetic-data LR: val {auroc(warm_net(), vx, vy):.4f} test {auroc(warm_net(), sx, sy):.4f}", flush=True)
for epochs, batch, lr in itertools.product([2, 5, 20], [512], [0.5, 2, 8]):
    plan = two_stage.plan(eps, 1e-5, sensitivity(0.2), share, batch, epochs, len(tx))
    torch.manual_seed(0)
    net = warm_net()
    wrapped = GradSampleModule(net)
    opt = guide_mod.dp_optimizer(torch.optim.SGD(wrapped.parameters(), lr=lr, momentum=0.9), plan["noise_multiplier"], 1.0, batch)
    batches = guide_mod.PoissonBatches(torch.utils.data.TensorDataset(fx, fy), batch / len(fx))
    for step in range(plan["steps"]):
        bx, by = batches.next()
        opt.zero_grad()
        nn.functional.cross_entropy(wrapped(bx), by.long(), reduction="sum").backward()
        opt.step()
    wrapped.remove_hooks()
    print(f"share {share} epochs {epochs} batch {batch} lr {lr} steps {plan['steps']} noise "
          f"{plan['noise_multiplier']:.3f}: val {auroc(net, vx, vy):.4f} test {auroc(net, sx, sy):.4f}", flush=True)
