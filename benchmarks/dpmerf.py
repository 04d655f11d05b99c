"""DP-MERF (method=dpmerf) on random MNIST-sized data, built from the method's configuration (conf/method/dpmerf.yaml):
the one pass over the private records that its release makes (60,000 uint8 records of 784 pixels, as the MNIST
datamodule stores them, D = 10,000 random Fourier features, `chunk_size` records per matrix product, as
DPMERF.release_embedding reads them) and one epoch of generator training (60,000 generated samples in batches of
`batch_size`: the generator, the features, the embedding loss, its backward pass and Adam; the default convolutional
generator and DP-MERF's MLP, `GENERATORS`), each in seconds and
as achieved GFLOP/s beside this process's fp32 matmul peak (benchmarks/rates.py).

    python -m benchmarks dpmerf [--quick]    # --quick: a tenth of the records and of the epoch, times scaled up

Work: the embedding pass is an (n, d) @ (d, D / 2) product (the frequencies W x) and a (K, n) @ (n, D) product (the
class sums), `embedding_flops` (cos and sin left out); a training step's FLOPs are counted by
torch.utils.flop_counter (the matrix products of its forward and backward passes; Adam is left out).
"""
from __future__ import annotations

import os

import torch
from hydra.utils import instantiate
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.rates import GIGA, best_seconds, bmm_flops, matmul_gflops, train_config
from dpgen.aggregation.mean_embedding import embedding_sums
from dpgen.data.base import TensorData
from dpgen.methods.dpmerf import DPMERF, record_chunks

SHAPE, CLASSES, RECORDS = (1, 28, 28), 10, 60_000


GENERATORS = {"conv (default)": [], "fc (DP-MERF's MLP)": ["method.module.generator.kind=fc"]}


def method(*overrides: str) -> DPMERF:
    """DPMERF as `python train.py method=dpmerf data=mnist <overrides>` builds it: its features, generator and
    settings."""
    cfg = train_config("method=dpmerf", *overrides)
    return instantiate(cfg.method.module, shape=SHAPE, num_classes=CLASSES, kind="image", _convert_="all")


def embedding_flops(records: int, dim: int, n_features: int, num_classes: int) -> int:
    """FLOPs of `embedding_sums` over `records` records: W x for D / 2 frequencies, then one-hot^T @ phi."""
    return bmm_flops(1, records, n_features // 2, dim) + bmm_flops(1, num_classes, n_features, records)


def random_records(n: int) -> TensorData:
    g = torch.Generator().manual_seed(0)
    return TensorData(torch.randint(0, 256, (n, *SHAPE), dtype=torch.uint8, generator=g),
                      torch.randint(0, CLASSES, (n,), generator=g))


def embedding_pass(model: DPMERF, data: TensorData) -> torch.Tensor:
    """The release's pass over the records, without its noise."""
    return embedding_sums(record_chunks(data, model.chunk_size), model.features, model.num_classes,
                          model.count_feature)


def generator_step(model: DPMERF, opt: torch.optim.Optimizer) -> None:
    """One training step of DPMERF.training_step, without Lightning: G(z, y), the embedding loss, backward, Adam."""
    y = model.sample_labels(model.batch_size)
    loss = model.embedding_loss(model.net_g(model.latent(model.batch_size), y), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def main(quick: bool = False) -> None:
    scale = 10 if quick else 1
    repeats = 1 if quick else 3
    model = method()
    peak = matmul_gflops(torch.float32, repeats=5)
    print(f"threads: {torch.get_num_threads()}; load average {os.getloadavg()[0]:.1f}; fp32 matmul peak of this "
          f"process {peak:.0f} GFLOP/s (torch.mm 2048 x 2048, best of 5)\n", flush=True)

    records = RECORDS // scale
    data = random_records(records)
    pass_s = best_seconds(lambda: embedding_pass(model, data), repeats) * scale
    pass_flop = embedding_flops(RECORDS, data.stored[0].numel(), model.features.n_features, CLASSES)

    rows = [(f"embedding pass: {RECORDS:,} records x {data.stored[0].numel()}, D = {model.features.n_features:,}, "
             f"chunks of {model.chunk_size}", pass_s, pass_flop)]
    for generator, overrides in GENERATORS.items():
        model = method(*overrides)
        opt = model.configure_optimizers()
        with FlopCounterMode(display=False) as counter:
            generator_step(model, opt)
        steps = RECORDS // model.batch_size
        epoch_s = best_seconds(lambda: [generator_step(model, opt) for _ in range(steps // scale)], repeats) * scale
        rows.append((f"generator epoch, {generator}: {steps} steps of {model.batch_size} samples (generator, "
                     f"features, loss, Adam)", epoch_s, counter.get_total_flops() * steps))
    print("| part | s | GFLOP | achieved GFLOP/s | achieved / fp32 matmul |\n|---|---:|---:|---:|---:|")
    for name, seconds, flop in rows:
        achieved = flop / seconds / GIGA
        print(f"| {name} | {seconds:.2f} | {flop / GIGA:.0f} | {achieved:.1f} | {achieved / peak:.2f} |")
    if quick:
        print(f"\n--quick: {records:,} records and a tenth of each epoch timed, times multiplied by {scale}")
    print(flush=True)
