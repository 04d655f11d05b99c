"""Probe (issue 86): DP-SGD logistic regression as a table's guide, with tail averaging of the iterates (post-processing) and
inputs shifted by the public constant 0.5; AUROC on a held-out fifth of the training split and on the test split.
Usage: PYTHONPATH=experiments/dpmerf_guide:experiments/dpmerf_tables python experiments/dpmerf_tables/dp_logistic_average_probe.py DATA EPS"""
import itertools
import sys

import torch
from opacus import GradSampleModule
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.optim.swa_utils import AveragedModel

from dpgen.aggregation.mean_embedding import sensitivity
from dpgen.methods import guide as guide_mod
from dpgen.privacy import two_stage
from held_out import held_out_split

data, eps = sys.argv[1], float(sys.argv[2])
(tx, ty), (fx, fy), (vx, vy), (sx, sy) = held_out_split(data)


class Shift(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, x):
        return x - self.c


def auroc(net, x, y):
    with torch.no_grad():
        return roc_auc_score(y.numpy(), net(x).softmax(1)[:, 1].numpy())


for epochs, batch, lr, mom, shift in itertools.product([20, 60], [512, 2048], [2, 8], [0.9, 0.0], [0.0, 0.5]):
    plan = two_stage.plan(eps, 1e-5, sensitivity(0.2), 0.5, batch, epochs, len(tx))
    torch.manual_seed(0)
    net = nn.Sequential(Shift(shift), nn.Linear(tx.shape[1], 2))
    avg = AveragedModel(net)
    steps = plan["steps"]
    # train_dpsgd's loop, with the average updated after each step of the second half
    wrapped = GradSampleModule(net)
    opt = guide_mod.dp_optimizer(torch.optim.SGD(wrapped.parameters(), lr=lr, momentum=mom), plan["noise_multiplier"], 1.0, batch)
    batches = guide_mod.PoissonBatches(torch.utils.data.TensorDataset(fx, fy), batch / len(tx))
    for step in range(steps):
        bx, by = batches.next()
        opt.zero_grad()
        nn.functional.cross_entropy(wrapped(bx), by.long(), reduction="sum").backward()
        opt.step()
        if step >= steps // 2:
            avg.update_parameters(net)
    wrapped.remove_hooks()
    print(f"epochs {epochs} batch {batch} lr {lr} momentum {mom} shift {shift} steps {steps} noise "
          f"{plan['noise_multiplier']:.3f}: last val {auroc(net, vx, vy):.4f} test {auroc(net, sx, sy):.4f}; "
          f"tail average val {auroc(avg.module, vx, vy):.4f} test {auroc(avg.module, sx, sy):.4f}", flush=True)
