"""The G-PATE authors' evaluation (`eval=reference`, conf/eval/reference.yaml) on this machine: one epoch of their CNN
(nn/classifier.py reference_script_cnn) trained with SGD at batch 512 on 100,000 MNIST-sized synthetic images, with
its test pass on the 10,000 test images, as `python -m dpgen.reference_eval` runs it (evaluation/stacked.py, one
model); the 600 epochs of one table cell are 600 such epochs. In seconds and as achieved GFLOP/s beside this
process's fp32 matmul peak (benchmarks/rates.py).

    python -m benchmarks reference_eval [--quick]    # --quick: a tenth of the epoch and test set, times scaled up

Then the same epoch of STACKED cells trained together (on a CPU each model in turn), per cell.

Work: the FLOPs of one training batch (forward and backward) and of the test pass, counted by
torch.utils.flop_counter (matrix products and convolutions; the optimizer step is left out).
"""
from __future__ import annotations

import os

import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.rates import GIGA, best_seconds, matmul_gflops
from dpgen.evaluation.stacked import train_stacked
from dpgen.evaluation.training import accuracy
from dpgen.nn.classifier import reference_script_cnn

SAMPLES, TEST, BATCH, EPOCHS, CLASSES = 100_000, 10_000, 512, 600, 10
STACKED = 4  # the four G-PATE cells of the paper's table


def train_batches(model, opt, x, y) -> None:
    """One pass of SGD over (x, y) in batches of BATCH, as train_classifier's epoch does it."""
    model.train()
    for start in range(0, len(x), BATCH):
        loss = F.cross_entropy(model(x[start:start + BATCH]), y[start:start + BATCH])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def main(quick: bool = False) -> None:
    scale = 10 if quick else 1
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(SAMPLES // scale, 1, 28, 28, generator=g), torch.randint(0, CLASSES, (SAMPLES // scale,), generator=g)
    test_x, test_y = torch.rand(TEST // scale, 1, 28, 28, generator=g), torch.randint(0, CLASSES, (TEST // scale,), generator=g)
    model = reference_script_cnn(1, CLASSES, 28)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    peak = matmul_gflops(torch.float32, repeats=5)
    print(f"threads: {torch.get_num_threads()}; load average {os.getloadavg()[0]:.1f}; fp32 matmul peak of this "
          f"process {peak:.0f} GFLOP/s (torch.mm 2048 x 2048, best of 5)\n", flush=True)
    with FlopCounterMode(display=False) as counter:
        train_batches(model, opt, x[:BATCH], y[:BATCH])
    train_flop = counter.get_total_flops() * SAMPLES / BATCH
    with FlopCounterMode(display=False) as counter:
        accuracy(model, test_x, test_y)
    test_flop = counter.get_total_flops() * scale

    def epochs(k: int) -> None:  # one epoch of k cells with their test passes, as the evaluation runs them
        train_stacked([reference_script_cnn(1, CLASSES, 28) for _ in range(k)], [x] * k, [y] * k, [test_x] * k,
                      [test_y] * k, lrs=[1e-3] * k, seeds=list(range(k)), max_epochs=1, batch_size=BATCH,
                      device="cpu")

    one_s = best_seconds(lambda: epochs(1), 1 if quick else 2) * scale
    achieved = (train_flop + test_flop) / one_s / GIGA
    print("| part | s | GFLOP | achieved GFLOP/s | achieved / fp32 matmul |\n|---|---:|---:|---:|---:|")
    print(f"| training epoch ({SAMPLES:,} samples, batch {BATCH}, SGD) and test pass ({TEST:,} images) | {one_s:.2f} "
          f"| {(train_flop + test_flop) / GIGA:.0f} | {achieved:.1f} | {achieved / peak:.2f} |")
    print(f"\none table cell ({EPOCHS} epochs, each with its test pass): {EPOCHS * one_s / 3600:.1f} h on these threads")
    stacked_s = best_seconds(lambda: epochs(STACKED), 1) * scale
    per_cell = stacked_s / STACKED
    print(f"{STACKED} cells stacked: {stacked_s:.2f} s an epoch with their test passes, {per_cell:.2f} s a cell "
          f"({one_s / per_cell:.2f} times the rate of one cell alone); one cell's {EPOCHS} epochs "
          f"{EPOCHS * per_cell / 3600:.1f} h")
    if quick:
        print(f"--quick: a tenth of the training epoch and of the test set timed, times multiplied by {scale}")
    print(flush=True)
