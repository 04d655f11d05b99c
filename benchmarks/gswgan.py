"""GS-WGAN's warm start (nn/critic.py CriticEnsemble.pretrain): one WGAN-GP Adam step of a chunk of critics, as
`python train.py experiment=published/gswgan_paper` builds them (the reference: 1000 critics of model_dim 64 in chunks
of 50, batches of 32 MNIST-sized records), in seconds, per critic, and as achieved GFLOP/s beside this process's fp32
matmul peak (benchmarks/rates.py); then what the reference's warm start, 1000 critics x 2000 iterations x 5 critic
steps, takes at that rate, and the same for the CPU-sized `experiment=published/gswgan_per_step` (100 critics of
model_dim 16, 100 iterations; the default's 500 critics x 20 iterations are as many critic steps). Where a GPU is
present, the same on it, with the configured chunk and with chunks of 200 critics (the GPU's matmul peak beside).

    python -m benchmarks gswgan [--quick]    # --quick: fewer repeats

Then, for the default configuration (`python train.py method=gswgan`), one generator step's two rounds of critic
steps (the scheduled block, and the copies of the at most B critics drawn): the seconds spent making their fakes
with `critic_fakes=own` (a generator batch per critic, the reference) and `critic_fakes=pool` (one batch of B per
class per round), beside the seconds of the round's WGAN-GP step itself.

Work: counted by torch's flop formulas (benchmarks/rates.py flop_count) over one critic's loss and gradients
computed alone (the forward, the input gradient of the gradient penalty, the backward through it; Adam left out):
the useful work, against which the rate is given. (torch's formulas applied to the kernels vmap runs count far more
than the machine can do in the time measured, so they are not used.)
"""
from __future__ import annotations

import os

import torch
from hydra.utils import instantiate

from benchmarks.rates import GIGA, best_seconds, flop_count, matmul_gflops, train_config
from dpgen.nn.critic import CriticEnsemble

SHAPE, CLASSES = (1, 28, 28), 10
VARIANTS = {"reference (model_dim 64)": ["experiment=published/gswgan_paper"],
            "CPU-sized (model_dim 16)": ["experiment=published/gswgan_per_step"]}


def configured(*overrides: str):
    """The method config of `python train.py <overrides>`."""
    return train_config(*overrides).method


def chunk_step(method, device: str = "cpu", chunk: int | None = None) -> tuple[CriticEnsemble, callable, callable]:
    """One chunk of the configured critics (or of `chunk` critics) on `device`, a function taking one WGAN-GP step
    of the chunk on random records, and one computing the loss and gradients of its first critic alone on the CPU
    (the useful work of one critic step)."""
    critics = dict(method.module.critics)
    chunk = chunk or critics["chunk_size"]
    del critics["chunk_size"]
    ensemble = CriticEnsemble(chunk, SHAPE, CLASSES, chunk_size=chunk, **critics)
    g = torch.Generator().manual_seed(0)
    b = method.batch_size
    real, fake = torch.rand(chunk, b, *SHAPE, generator=g), torch.rand(chunk, b, *SHAPE, generator=g)
    labels = torch.randint(0, CLASSES, (chunk, b), generator=g)
    alpha = torch.rand(b, *(1,) * len(SHAPE), generator=g)
    one = {name: value[0].clone() for name, value in ensemble.stacked(ensemble.params, 0, 1).items()}
    on = [t.to(device) for t in (real, labels, fake)]
    ensemble.to(device)
    return (ensemble, lambda: ensemble.train_step(0, chunk, *on, g),
            lambda: torch.func.grad_and_value(ensemble.loss)(one, real[0], labels[0], fake[0], alpha))


def main(quick: bool = False) -> None:
    repeats = 1 if quick else 3
    for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
        peak = matmul_gflops(torch.float32, repeats=5, device=device)
        where = (f"threads: {torch.get_num_threads()}; load average {os.getloadavg()[0]:.1f}" if device == "cpu"
                 else f"GPU: {torch.cuda.get_device_name()}")
        print(f"{where}; fp32 matmul peak of this process {peak:.0f} GFLOP/s (torch.mm 2048 x 2048, best of 5)\n"
              "\n| critics | chunk | s per chunk step | ms per critic step | GFLOP per critic step | achieved GFLOP/s | "
              "achieved / fp32 matmul | warm start (n critics x iterations x critic steps) |\n"
              "|---|---:|---:|---:|---:|---:|---:|---|", flush=True)
        for name, overrides in VARIANTS.items():
            method = configured(*overrides)
            for chunk in (None, 200) if device == "cuda" else (None,):
                ensemble, step, single = chunk_step(method, device, chunk)
                flop = flop_count(single)
                seconds = best_seconds(step, repeats, device)
                per_critic = seconds / ensemble.n
                n, pre = method.module.n_discriminators, method.module.pretrain
                total = n * pre.steps * pre.critic_steps * per_critic
                print(f"| {name} | {ensemble.n} | {seconds:.3f} | {1e3 * per_critic:.2f} | {flop / GIGA:.3f} | "
                      f"{flop / per_critic / GIGA:.1f} | {flop / per_critic / GIGA / peak:.2f} | {n} x {pre.steps} x "
                      f"{pre.critic_steps}: {total / 3600:.1f} h |", flush=True)
                del ensemble, step
        print(flush=True)
    fakes_rounds(repeats)


def fakes_rounds(repeats: int) -> None:
    """Seconds per round of critic steps of the default configuration on the CPU: its fakes made either way, and
    the critics' step (table described in the module's docstring)."""
    config = train_config("method=gswgan")
    method, g = config.method, torch.Generator().manual_seed(0)
    models = {fakes: instantiate(method.module, shape=SHAPE, num_classes=CLASSES, kind="image", critic_fakes=fakes)
              for fakes in ("own", "pool")}
    b = method.batch_size
    print("| round of critic steps (default configuration) | critics | fakes, own (s) | fakes, pool (s) | "
          "critics' step (s) |\n|---|---:|---:|---:|---:|", flush=True)
    totals = {"own": 0.0, "pool": 0.0, "critics": 0.0}
    for name, k in (("scheduled block", method.module.scheduled_critics), ("copies of the drawn critics", b)):
        labels = torch.randint(0, CLASSES, (k, b), generator=g)
        seconds = {fakes: best_seconds(lambda: model.fakes_for(labels), repeats) for fakes, model in models.items()}
        ensemble, step, _ = chunk_step(method, chunk=k)
        seconds["critics"] = best_seconds(step, repeats)
        del ensemble, step
        for part, value in seconds.items():
            totals[part] += value
        print(f"| {name} | {k} | {seconds['own']:.3f} | {seconds['pool']:.3f} | {seconds['critics']:.3f} |", flush=True)
    print(f"| both (one generator step with critic_steps=1) | | {totals['own']:.3f} | {totals['pool']:.3f} | "
          f"{totals['critics']:.3f} |\n", flush=True)
