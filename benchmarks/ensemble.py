"""G-PATE teacher ensemble (MNIST reference teachers, batch 15): speed, memory, and bf16 vs fp32 Adam moments.

python -m benchmarks ensemble [--quick]; on a GPU `python -m benchmarks.ensemble --gpu 50,500,4000` times 4000
teachers with each chunk size. First the kernels of one chunk of teachers, the default teachers
(conf/method/gpate.yaml) and the paper's (experiment=gpate/mnist_eps1), are timed one by one against this
process's peak rates (benchmarks/rates.py): the grouped convolutions and FC baddbmm of a real + fake forward
(TeacherEnsemble.logits, recorded as it runs) and the fused Adam update. Then whole iterations: each ensemble
size runs in its own process so that its peak RSS is its own. Beside each time the process measures the
machine's fp32 and bf16 matrix-product rates and counts the iteration's floating-point operations
(torch.utils.flop_counter), so the achieved GFLOP/s can be read as a fraction of what this machine does at that
moment. The naive loop (one nn.Module + torch.optim.Adam per teacher) is timed on a few teachers and
extrapolated; torch.func.vmap is timed on one chunk's gradients against the grouped implementation.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch
from omegaconf import OmegaConf
from torch.func import functional_call, grad, vmap
from torch.nn.functional import binary_cross_entropy_with_logits as bce
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.rates import (adam_bytes, aten, best_seconds, describe_peaks, matmul_gflops, matrix_kernels, peaks,
                              rate_table, sync, train_config)
from dpgen.aggregation.dpgradagg import vote_histograms
from dpgen.nn.discriminator import ConditionalDiscriminator
from dpgen.memory import reuse_freed_memory
from dpgen.nn.ensemble import TeacherEnsemble

SHAPE, CLASSES, BATCH = (1, 28, 28), 10, 15
GB = 1e9
TEACHER_OPS = (aten.convolution.default, aten.baddbmm.default)  # the teachers' kernels timed one by one


def data(n: int, seed: int = 0, batch: int = BATCH):
    """Random real batches of n teachers and one shared fake batch, with labels."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, batch, *SHAPE, generator=g), torch.randint(0, CLASSES, (n, batch), generator=g),
            torch.rand(batch, *SHAPE, generator=g), torch.randint(0, CLASSES, (batch,), generator=g))


def iteration(ens: TeacherEnsemble, batch) -> float:
    """Seconds of one teacher iteration of G-PATE: train_step then input_grads."""
    start = time.perf_counter()
    ens.train_step(*batch)
    ens.input_grads(*batch[2:])
    sync(ens.device.type)
    return time.perf_counter() - start


def flops_per_teacher(n: int = 4) -> float:
    """Floating-point operations of one iteration (`iteration`) per teacher, counted on n teachers."""
    ens = TeacherEnsemble(n, SHAPE, CLASSES, moment_dtype=torch.bfloat16)
    with FlopCounterMode(display=False) as counter:
        iteration(ens, data(n, seed=3))
    return counter.get_total_flops() / n


def teacher_configs() -> dict[str, tuple[int, dict]]:
    """Per-teacher batch and TeacherEnsemble options of the default teachers and of the paper's, as `python
    train.py` and `python train.py experiment=gpate/mnist_eps1` compose them."""
    cfgs = {"default": train_config(), "paper": train_config("experiment=gpate/mnist_eps1")}
    return {name: (cfg.method.batch_size, OmegaConf.to_container(cfg.method.module.teachers, resolve=True))
            for name, cfg in cfgs.items()}


def kernel_rows(name: str, batch: int, teachers: dict, repeats: int) -> list[dict]:
    """One chunk of these teachers, as train_step runs it: the grouped convolutions and FC baddbmm of the real +
    fake forward (recorded from TeacherEnsemble.logits) and the fused Adam update, each timed (`rate_table` rows)."""
    ens = TeacherEnsemble(teachers["chunk_size"], SHAPE, CLASSES, **teachers)
    n = ens.chunk()
    real_x, real_y, fake_x, fake_y = data(n, batch=batch)
    x, y = torch.cat([real_x, fake_x.expand(n, *fake_x.shape)], 1), torch.cat([real_y, fake_y.expand(n, batch)], 1)
    theta = ens.stacked(ens.params, 0, n)
    with torch.no_grad():
        kernels = matrix_kernels(lambda: ens.logits(theta, x, y, groups=2), TEACHER_OPS)
    case = f"{name}: {n} teachers x {batch} + {batch} samples"
    rows = [{**k, "case": case, "seconds": best_seconds(k["run"], repeats)} for k in kernels]
    grads = [torch.randn_like(p) for p in theta.values()]
    wide, numel = ens.widening_buffers(), sum(g.numel() for g in grads)
    ens.step.fill_(1)  # Adam's first step (step 0 would divide by a zero bias correction)
    moments = next(ens.exp_avg.buffers()).dtype
    seconds = best_seconds(lambda: ens.adam(0, n, grads, wide), repeats)
    return rows + [{"case": case, "kernel": "fused Adam", "seconds": seconds,
                    "shape": f"{numel / 1e6:.2f} M parameters, {str(moments).removeprefix('torch.')} moments",
                    "bytes": adam_bytes(numel, ens.dtype.itemsize, moments.itemsize)}]


def kernels(quick: bool) -> None:
    """This process's peak rates, then the teachers' kernels (`kernel_rows`) against them."""
    repeats = 5 if quick else 20
    rates = peaks(repeats)
    print(describe_peaks(rates) + "\n", flush=True)
    rows = [row for name, (batch, teachers) in teacher_configs().items()
            for row in kernel_rows(name, batch, teachers, repeats)]
    print(rate_table(rows, rates) + "\n", flush=True)


def naive_loop_seconds_per_teacher(k: int = 4) -> float:
    """One nn.Module and one torch.optim.Adam per teacher, the same work per teacher as `iteration`."""
    real_x, real_y, fake_x, fake_y = data(k, seed=1)
    teachers = [ConditionalDiscriminator(SHAPE, CLASSES) for _ in range(k)]
    optims = [torch.optim.Adam(t.parameters(), lr=1e-3, betas=(0.5, 0.999)) for t in teachers]

    def run():
        for i, (d, opt) in enumerate(zip(teachers, optims)):
            real, fake = d(real_x[i], real_y[i]), d(fake_x, fake_y)
            loss = bce(real, torch.ones_like(real)) + bce(fake, torch.zeros_like(fake))
            opt.zero_grad()
            loss.backward()
            opt.step()
            x = fake_x.clone().requires_grad_()
            out = d(x, fake_y)
            torch.autograd.grad(bce(out, torch.ones_like(out)), [x])
    run()
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) / k


def chunk_grad_seconds(ens: TeacherEnsemble, n: int = 50) -> tuple[float, float]:
    """Parameter gradients of one n-teacher chunk (real + fake forward, backward): grouped vs torch.func.vmap."""
    real_x, real_y, fake_x, fake_y = data(n, seed=2)
    theta = {name: p.detach().requires_grad_() for name, p in ens.stacked(ens.params, 0, n).items()}
    x = torch.cat([real_x, fake_x.expand(n, *fake_x.shape)], 1)
    y = torch.cat([real_y, fake_y.expand(n, BATCH)], 1)
    target = torch.cat([torch.ones(BATCH), torch.zeros(BATCH)])

    def grouped():
        logit = ens.logits(theta, x, y, groups=2)
        loss = bce(logit, target.expand_as(logit), reduction="none").view(n, 2, BATCH).mean(2).sum()
        return torch.autograd.grad(loss, list(theta.values()))

    template = ConditionalDiscriminator(SHAPE, CLASSES)

    def one_teacher_loss(params, rx, ry):
        real = functional_call(template, params, (rx, ry))
        fake = functional_call(template, params, (fake_x, fake_y))
        return bce(real, torch.ones_like(real)) + bce(fake, torch.zeros_like(fake))

    per_teacher = vmap(grad(one_teacher_loss))
    plain = {name: p.detach() for name, p in theta.items()}

    def vmapped():
        return per_teacher(plain, real_x, real_y)

    seconds = []
    for f in (grouped, vmapped):
        f()
        start = time.perf_counter()
        f()
        seconds.append(time.perf_counter() - start)
    return seconds[0], seconds[1]


def case(n: int, with_loop: bool, compute_dtype: str | None = None, device: str = "cpu", chunk: int = 50) -> dict:
    """One ensemble size, in this process: build, iterate, measure (`chunk` teachers at a time on a GPU)."""
    if os.path.exists("/proc/self/oom_score_adj"):  # on a shared machine, be the first to go if memory runs out
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    reuse_freed_memory()  # as the training entry points
    start = time.perf_counter()
    ens = TeacherEnsemble(n, SHAPE, CLASSES, moment_dtype=torch.bfloat16, compute_dtype=compute_dtype,
                          chunk_size=chunk).to(device)
    build = time.perf_counter() - start
    batch = [t.to(device) for t in data(n)]
    times = [iteration(ens, batch) for _ in range(1 if n >= 4000 and device == "cpu" else 3)]
    flops = flops_per_teacher() * n
    out = {"teachers": n, "device": device, "chunk": ens.chunk(), "compute": compute_dtype or "float32",
           "build_s": build, "iteration_s": times[-1], "first_iteration_s": times[0],
           "iteration_gflop": flops / 1e9, "achieved_gflops": flops / times[-1] / 1e9,
           "fp32_matmul_gflops": matmul_gflops(torch.float32, device=device),
           "bf16_matmul_gflops": matmul_gflops(torch.bfloat16, device=device),
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # before loop / vmap
           "memory_bytes": ens.memory_bytes(BATCH), "load_average": os.getloadavg(),
           "threads": torch.get_num_threads()}
    if device == "cuda":
        out["peak_gpu_bytes"] = torch.cuda.max_memory_allocated()
    if with_loop:
        out["loop_s_per_teacher"] = naive_loop_seconds_per_teacher()
        out["chunk_grad_grouped_s"], out["chunk_grad_vmap_s"] = chunk_grad_seconds(ens)
    return out


def drift(n: int = 10, steps: int = 100, checkpoints: tuple[int, ...] = (10, 100)) -> dict:
    """Train n teachers for `steps` iterations four times on the same data stream: fp32 moments, bf16 moments,
    fp32 moments from an initialisation perturbed by 1e-7 (relative): the chaos floor of this training, and
    bf16 passes (`compute_dtype`) with fp32 moments.
    At each checkpoint compare the parameters, the teachers' DPGradAgg votes (k = 10 projections, c = 1e-4,
    B = 10 bins) on a fixed fake batch, and the teachers' accuracy on held-out real / fake batches.

    Data: 10 random class prototypes; real = prototype of its label + noise, fake = prototype of ANOTHER
    class + the same noise (the marginals match, only the label agreement tells real from fake)."""
    g = torch.Generator().manual_seed(0)
    prototypes = torch.rand(CLASSES, *SHAPE, generator=g)

    def samples(y, matched):
        shown = y if matched else (y + torch.randint(1, CLASSES, y.shape, generator=g)) % CLASSES
        return (prototypes[shown] + 0.1 * torch.randn(*y.shape, *SHAPE, generator=g)).clamp(0, 1)

    stream = []
    for _ in range(steps):
        real_y = torch.randint(0, CLASSES, (n, BATCH), generator=g)
        fake_y = torch.randint(0, CLASSES, (BATCH,), generator=g)
        stream.append((samples(real_y, True), real_y, samples(fake_y, False), fake_y))
    probe_y = torch.arange(BATCH) % CLASSES
    probe_real, probe_fake = samples(probe_y, True), samples(probe_y, False)
    proj = torch.randn(BATCH, 784, 10, generator=g) / 10 ** 0.5

    def run(moment_dtype, perturb, compute_dtype=None):
        ens = TeacherEnsemble(n, SHAPE, CLASSES, moment_dtype=moment_dtype, compute_dtype=compute_dtype, seed=0)
        if perturb:
            for p in ens.params.buffers():
                p.mul_(1 + 1e-7 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
        start, seen = torch.cat([p.flatten() for p in ens.params.buffers()]), {}
        for step, batch in enumerate(stream, 1):
            ens.train_step(*batch)
            if step in checkpoints:
                theta = ens.stacked(ens.params)
                with torch.no_grad():
                    real = ens.logits(theta, probe_real.expand(n, *probe_real.shape), probe_y.expand(n, BATCH))
                    fake = ens.logits(theta, probe_fake.expand(n, *probe_fake.shape), probe_y.expand(n, BATCH))
                grads = ens.input_grads(probe_fake, probe_y)
                seen[step] = {"params": torch.cat([p.flatten() for p in ens.params.buffers()]),
                              "accuracy": ((real > 0).float().mean() + (fake < 0).float().mean()).item() / 2,
                              "projected": torch.einsum("tsd,sdk->tsk", grads, proj).reshape(n, -1)}
        return start, seen

    base_start, base = run(torch.float32, False)
    result = {"teachers": n, "fp32_accuracy": {s: base[s]["accuracy"] for s in checkpoints}}
    for name, moment_dtype, perturb, compute in (("bf16", torch.bfloat16, False, None),
                                                 ("fp32_perturbed", torch.float32, True, None),
                                                 ("bf16_compute", torch.float32, False, torch.bfloat16)):
        _, other = run(moment_dtype, perturb, compute)
        result[name] = {s: {
            "param_drift_rel": ((other[s]["params"] - base[s]["params"]).norm()
                                / (base[s]["params"] - base_start).norm()).item(),
            "accuracy": other[s]["accuracy"],
            "votes_changed": (vote_bins(other[s]["projected"])
                              != vote_bins(base[s]["projected"])).float().mean().item(),
            "plurality_changed": (vote_histograms(other[s]["projected"], 1e-4, 10).argmax(1)
                                  != vote_histograms(base[s]["projected"], 1e-4, 10).argmax(1)).float().mean().item(),
        } for s in checkpoints}
    return result


def vote_bins(projected: torch.Tensor, clip: float = 1e-4, bins: int = 10) -> torch.Tensor:
    """The bin each teacher votes for (Algorithm 2: clip to [-c, c], bins of width 2c/B)."""
    return ((projected.clamp(-clip, clip) + clip) / (2 * clip / bins)).floor().clamp(max=bins - 1)


def table(rows: list[dict]) -> str:
    loop = rows[0]["loop_s_per_teacher"]
    lines = ["| teachers | compute | s / iteration | ms / teacher | achieved GFLOP/s | fp32 / bf16 matmul GFLOP/s | "
             "achieved / fp32 matmul | naive loop s / iteration (extrapolated) | params + Adam GB | est. working GB | "
             "peak RSS GB |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mem, n = r["memory_bytes"], r["teachers"]
        lines.append(f"| {n} | {r['compute']} | {r['iteration_s']:.2f} | {1e3 * r['iteration_s'] / n:.2f} | "
                     f"{r['achieved_gflops']:.0f} | {r['fp32_matmul_gflops']:.0f} / {r['bf16_matmul_gflops']:.0f} | "
                     f"{r['achieved_gflops'] / r['fp32_matmul_gflops']:.2f} | {loop * n:.2f} | "
                     f"{(mem['parameters'] + mem['optimizer']) / GB:.2f} | {mem['working'] / GB:.2f} | "
                     f"{r['peak_rss_bytes'] / GB:.2f} |")
    return "\n".join(lines)


def run_case(n: int, *flags: str) -> dict:
    """`case` for n teachers in its own process (so that its peak memory is its own), with these flags."""
    cmd = [sys.executable, "-m", "benchmarks.ensemble", "--case", str(n), *flags]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def gpu(chunks: list[int], n: int = 4000) -> None:
    """4000 teachers on a CUDA device, one process per chunk size: how many teachers to run at a time there."""
    print("| teachers per chunk | s / iteration | first iteration s | achieved GFLOP/s | achieved / fp32 matmul | "
          "peak GPU GB |\n|---:|---:|---:|---:|---:|---:|")
    for chunk in chunks:
        r = run_case(n, "--device", "cuda", "--chunk", str(chunk))
        print(f"| {r['chunk']} | {r['iteration_s']:.3f} | {r['first_iteration_s']:.2f} | {r['achieved_gflops']:.0f} | "
              f"{r['achieved_gflops'] / r['fp32_matmul_gflops']:.2f} | {r['peak_gpu_bytes'] / GB:.1f} |", flush=True)


def main(quick: bool = False) -> None:
    """Kernels against this process's peak rates, then whole iterations (one process per case), then, unless
    `quick`, the bf16 moments' drift."""
    kernels(quick)
    sizes = (100,) if quick else (100, 1000, 4000)
    rows = []
    bf16_sizes = sizes[-2:]  # bf16 compute beside fp32 at the sizes of the speed goal (1000 and 4000 teachers)
    for i, (n, compute) in enumerate([(n, None) for n in sizes] + [(n, "bfloat16") for n in bf16_sizes]):
        rows.append(run_case(n, *(["--loop"] if i == 0 else []), *(["--compute", compute] if compute else [])))
        print(json.dumps(rows[-1]), flush=True)
    r = rows[0]
    print(f"\nthreads: {r['threads']}; load average {r['load_average'][0]:.1f}; batch {BATCH}; chunk 15; "
          f"bf16 Adam moments\n\n{table(rows)}\n")
    print(f"gradients of one 50-teacher chunk: grouped {1e3 * r['chunk_grad_grouped_s']:.0f} ms, "
          f"torch.func.vmap {1e3 * r['chunk_grad_vmap_s']:.0f} ms\n")
    if not quick:
        print(json.dumps(drift()), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", type=int, help="run one ensemble size and print its measurements as JSON")
    parser.add_argument("--compute", help="the teachers' compute_dtype in --case (e.g. bfloat16)")
    parser.add_argument("--loop", action="store_true", help="also time the naive loop and vmap")
    parser.add_argument("--drift", action="store_true", help="only the bf16 vs fp32 moments experiment")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu", help="in --case: cpu or cuda")
    parser.add_argument("--chunk", type=int, default=50, help="in --case: teachers per chunk on a GPU")
    parser.add_argument("--gpu", help="comma-separated chunk sizes: time 4000 teachers on CUDA with each")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(case(args.case, args.loop, args.compute, args.device, args.chunk)))
    elif args.gpu:
        gpu([int(c) for c in args.gpu.split(",")])
    elif args.drift:
        print(json.dumps(drift()))
    else:
        main(args.quick)
