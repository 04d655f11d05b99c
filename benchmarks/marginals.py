"""DP-MERF's generator loss with the marginal features (aggregation/feature_maps.py MarginalFeatures) on a batch in
HI's layout (5 continuous columns of 10 bins, categorical blocks of 2, 2, 6, 3, 2 and 4, two classes; the batch
of 500 of experiment dpmerf/hi_eps1_marginals): forward and backward, from the explicit (n, n_features) rows
(`explicit_mmd_loss`) and from the class sums the map computes without them (`MarginalFeatures.mmd_loss`), orders
2 and 3, in seconds, with this process's fp32 matmul peak beside them (benchmarks/rates.py).

    python -m benchmarks marginals [--quick]    # --quick: fewer repeats
"""
from __future__ import annotations

import os

import torch

from benchmarks.rates import best_seconds, matmul_gflops
from dpgen.aggregation import feature_maps

ONE_HOT, CONTINUOUS, BINS, BATCH, CLASSES = (2, 2, 6, 3, 2, 4), 5, 10, 500, 2


def loss_step(loss) -> None:
    loss().backward()


def main(quick: bool = False) -> None:
    repeats = 2 if quick else 5
    peak = matmul_gflops(torch.float32, repeats=5)
    print(f"threads: {torch.get_num_threads()}; load average {os.getloadavg()[0]:.1f}; fp32 matmul peak of this "
          f"process {peak:.0f} GFLOP/s (torch.mm 2048 x 2048, best of 5)\n", flush=True)
    g = torch.Generator().manual_seed(0)
    dim = CONTINUOUS + sum(ONE_HOT)
    x = torch.rand(BATCH, dim, generator=g).requires_grad_()
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    print("| order | features a class | explicit rows, s | class sums, s | ratio |\n|---:|---:|---:|---:|---:|")
    for order in (2, 3):
        phi = feature_maps.MarginalFeatures(dim, ONE_HOT, BINS, order)
        target = torch.rand(CLASSES, phi.n_features, generator=g) / phi.n_features
        explicit = best_seconds(lambda: loss_step(lambda: feature_maps.explicit_mmd_loss(phi(x), y, target)), repeats)
        sums = best_seconds(lambda: loss_step(lambda: phi.mmd_loss(x, y, target)), repeats)
        print(f"| {order} | {phi.n_features:,} | {explicit:.3f} | {sums:.3f} | {explicit / sums:.1f} |", flush=True)
