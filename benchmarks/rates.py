"""What the benchmarks share to put a time beside what the machine can do: the best wall-clock time of a call,
this process's peak rates (fp32 and bf16 matrix products, memory copy), the work (FLOPs or bytes) of the kernels
they time, and a table of achieved rates against those peaks.

Work per kernel, counted from its shapes (multiply-adds count 2 FLOPs; bias adds and the like are left out):
- convolution, forward: 2 * N * Cout * Hout * Wout * (Cin / groups) * kh * kw (`conv_flops`);
- batched matrix product (bmm, baddbmm) of (b, m, k) by (b, k, n): 2 * b * m * n * k (`bmm_flops`);
- Adam, bandwidth-bound, so bytes instead (`adam_bytes`), set against the memory-copy rate.
"""
from __future__ import annotations

import math
import time
from typing import Callable

import torch
from hydra import compose, initialize_config_dir
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from dpgen.cli.common import CONF_DIR

GIGA = 1e9
aten = torch.ops.aten


def train_config(*overrides: str):
    """The configuration `python train.py <overrides>` runs with (composed, not resolved)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", list(overrides))


def sync(device: str) -> None:
    """Wait for the GPU's queued work, so that a wall-clock time covers it."""
    if device == "cuda":
        torch.cuda.synchronize()


def best_seconds(run: Callable[[], object], repeats: int = 5, device: str = "cpu") -> float:
    """The shortest wall-clock time of `repeats` calls of run(), after one untimed warm-up call."""
    run()
    sync(device)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def matmul_gflops(dtype: torch.dtype, size: int = 2048, repeats: int = 5, device: str = "cpu") -> float:
    """This process's peak for `dtype` (GFLOP/s): torch.mm of two size x size matrices into a preallocated output,
    best of `repeats`, with torch's current number of threads."""
    a, b, out = (torch.randn(size, size, dtype=dtype, device=device) for _ in range(3))
    return bmm_flops(1, size, size, size) / best_seconds(lambda: torch.mm(a, b, out=out), repeats, device) / GIGA


def copy_gbps(megabytes: int = 256, repeats: int = 5, device: str = "cpu") -> float:
    """This process's memory bandwidth (GB/s): bytes read plus written by one copy of `megabytes` into a
    preallocated tensor, best of `repeats`."""
    source = torch.rand(megabytes * 2**20 // 4, device=device)
    target = torch.empty_like(source)
    return 2 * source.numel() * 4 / best_seconds(lambda: target.copy_(source), repeats, device) / GIGA


def peaks(repeats: int = 5, device: str = "cpu") -> dict[str, float]:
    """The rates kernels are set against: fp32 and bf16 matrix products (GFLOP/s, keyed by dtype) and a memory
    copy (GB/s, key 'copy')."""
    return {torch.float32: matmul_gflops(torch.float32, repeats=repeats, device=device),
            torch.bfloat16: matmul_gflops(torch.bfloat16, repeats=repeats, device=device),
            "copy": copy_gbps(repeats=repeats, device=device)}


def describe_peaks(rates: dict) -> str:
    """One line of `peaks` for the output."""
    return (f"peak, this process, {torch.get_num_threads()} threads: fp32 matmul {rates[torch.float32]:.0f} GFLOP/s, "
            f"bf16 matmul {rates[torch.bfloat16]:.0f} GFLOP/s (torch.mm 2048 x 2048, best of several), "
            f"memory copy {rates['copy']:.1f} GB/s (256 MB)")


def conv_flops(batch: int, out_channels: int, out_height: int, out_width: int, in_channels_per_group: int,
               kernel_height: int, kernel_width: int) -> int:
    """FLOPs of one forward (grouped) convolution."""
    return 2 * batch * out_channels * out_height * out_width * in_channels_per_group * kernel_height * kernel_width


def bmm_flops(b: int, m: int, n: int, k: int) -> int:
    """FLOPs of b products of (m, k) by (k, n) matrices."""
    return 2 * b * m * n * k


def adam_bytes(numel: int, param_bytes: int = 4, moment_bytes: int = 4) -> int:
    """Bytes one Adam update of `numel` parameters moves: the fused kernel reads parameter, gradient and both
    moments and writes parameter and moments (7 x param_bytes); moments stored in another dtype are first
    copied into buffers of the parameter dtype and back (2 moments x 2 copies, each reading one dtype and
    writing the other)."""
    widening = 4 * (param_bytes + moment_bytes) if moment_bytes != param_bytes else 0
    return numel * (7 * param_bytes + widening)


class Recorder(TorchDispatchMode):
    """Records the calls of the aten operators `ops` made while it is active, with their arguments and result."""

    def __init__(self, ops):
        super().__init__()
        self.ops, self.calls = set(ops), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in self.ops:
            self.calls.append((func, args, kwargs or {}, out))
        return out


MATRIX_OPS = (aten.convolution.default, aten.bmm.default, aten.baddbmm.default)


class FlopTally(TorchDispatchMode):
    """The FLOPs of every operator torch's flop counter knows (matrix products, convolutions and their backward
    passes), by torch's own formulas (torch.utils.flop_counter.flop_registry), without the module hooks of
    FlopCounterMode, which refuse gradients taken inside torch.func transforms (GS-WGAN's gradient penalty)."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **(kwargs or {}), out_val=out)
        return out


def flop_count(run: Callable[[], object]) -> int:
    """FLOPs of one call of run() (FlopTally)."""
    with FlopTally() as tally:
        run()
    return tally.flops


def matrix_kernels(run: Callable[[], object], ops=MATRIX_OPS) -> list[dict]:
    """The calls of `ops` (convolutions, batched matrix products) that run() makes, in order: kernel name, shape
    text, dtype, FLOPs, and `run`, a function that repeats the call on the same tensors (to time it)."""
    with Recorder(ops) as recorder:
        run()
    return [matrix_kernel(*call) for call in recorder.calls]


def matrix_kernel(func, args, kwargs, out) -> dict:
    """One recorded call of `matrix_kernels` as its entry."""
    if func is aten.convolution.default:
        x, weight, groups = args[0], args[1], args[8]
        flops = conv_flops(x.shape[0], *out.shape[1:], *weight.shape[1:])
        shape = f"{tuple(x.shape)} * {tuple(weight.shape)}, {groups} groups"
    else:
        left, right = args[-2:]
        flops = bmm_flops(left.shape[0], left.shape[1], right.shape[2], left.shape[2])
        shape = f"{tuple(left.shape)} @ {tuple(right.shape)}"
    return {"kernel": func.__name__.split(".")[0], "shape": shape, "dtype": out.dtype, "flop": flops,
            "run": lambda: func(*args, **kwargs)}


def rate_table(rows: list[dict], rates: dict) -> str:
    """Markdown table of timed kernels: each row has case, kernel, shape, seconds, dtype and either `flop`
    (set against the matrix-product peak of its dtype) or `bytes` (set against the memory-copy rate)."""
    lines = ["| case | kernel | shape | ms | achieved | achieved / peak |", "|---|---|---|---:|---:|---:|"]
    for r in rows:
        if "flop" in r:
            achieved, unit, peak = r["flop"] / r["seconds"] / GIGA, "GFLOP/s", rates[r["dtype"]]
            against = f"{str(r['dtype']).removeprefix('torch.')} matmul"
        else:
            achieved, unit, peak, against = r["bytes"] / r["seconds"] / GIGA, "GB/s", rates["copy"], "copy"
        lines.append(f"| {r['case']} | {r['kernel']} | {r['shape']} | {1e3 * r['seconds']:.2f} | "
                     f"{achieved:.1f} {unit} | {achieved / peak:.2f} of {against} |")
    return "\n".join(lines)
