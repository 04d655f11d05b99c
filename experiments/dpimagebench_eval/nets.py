"""The three downstream classifiers of the DPImageBench benchmark (2019ChenGong/DPImageBench, commit 565f8d7,
evaluation/classifier/{wrn,resnet,resnext}.py as built by evaluation/evaluator.py for 28x28 images), written anew
for experiments/dpimagebench_eval/evaluate.py, and reduced members of each family for CPU measurements.

    wrn       WRN-40-4, dropout 0.3 (dpgen.nn.wide_resnet.WideResNet; linear bias zeroed as DPImageBench does)
    resnet    ResNet-110 (CIFAR style, basic blocks, 16/32/64 channels)
    resnext   ResNeXt-29 8x64d (cardinality 8, widen factor 4: stage widths 256/512/1024)
    wrn16_2   WRN-16-2, dropout 0.3
    resnet20  ResNet-20 (3 basic blocks per stage)
    resnext11 ResNeXt-11 2x64d (1 bottleneck per stage, cardinality 2, widen factor 2: stage widths 128/256/512,
              grouped widths 128/256/512); ResNeXt-11 8x64d (cardinality 8, widen 4) costs 3x WRN-40-4 per batch
    resnext11_8x64d  that ResNeXt-11 8x64d, for reference

`python nets.py` prints the parameter counts; `python nets.py --time NAME [--batch 256] [--reps 2]` times training
batches (forward, backward, Adam step) after one warm-up batch.
"""
from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from dpgen.nn.wide_resnet import WideResNet


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class Basic(nn.Module):
    """Post-activation basic block: conv-BN-ReLU-conv-BN, plus the shortcut (1x1 conv + BN when the shape changes),
    then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = conv3x3(cout, cout), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class CifarResNet(nn.Module):
    """ResNet-`depth` for small images (He et al. 2016, section 4.2): depth = 6n + 2, n basic blocks in each of three
    stages of 16, 32, 64 channels (strides 1, 2, 2), average pooling, linear. Convolutions N(0, sqrt(2 / (k*k*out))),
    BN weight 1 and bias 0, linear left at PyTorch's default, as DPImageBench's resnet.py."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, depth: int = 110):
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"a basic-block ResNet's depth is 6n + 2, got {depth}")
        n = (depth - 2) // 6
        self.stem = nn.Sequential(conv3x3(in_channels, 16), nn.BatchNorm2d(16), nn.ReLU())
        blocks, cin = [], 16
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                blocks.append(Basic(cin, width, stride if i == 0 else 1))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                k = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / k))
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))  # = AvgPool2d(img_size // 4) at 28x28


class Bottleneck(nn.Module):
    """ResNeXt block, type C (Xie et al. 2017): 1x1 to D = cardinality * cout / widen channels, grouped 3x3 (the
    stride), 1x1 to cout, each followed by BN (ReLU but after the last), plus the shortcut (1x1 conv with the stride
    + BN when the channel count changes), then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int, cardinality: int, widen: int):
        super().__init__()
        d = cardinality * cout // widen
        self.reduce, self.bn_reduce = nn.Conv2d(cin, d, 1, bias=False), nn.BatchNorm2d(d)
        self.grouped = nn.Conv2d(d, d, 3, stride=stride, padding=1, groups=cardinality, bias=False)
        self.bn_grouped = nn.BatchNorm2d(d)
        self.expand, self.bn_expand = nn.Conv2d(d, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.short = None
        if cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn_reduce(self.reduce(x)))
        y = F.relu(self.bn_grouped(self.grouped(y)))
        y = self.bn_expand(self.expand(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class ResNeXt(nn.Module):
    """ResNeXt-`depth` for small images: depth = 9n + 2, a 64-channel 3x3 stem (BN, ReLU), three stages of n
    bottlenecks with outputs 64w, 128w, 256w (w = widen; strides 1, 2, 2), average pooling, linear. Convolutions
    kaiming normal (fan_out), linear weight kaiming normal (fan_in), BN weight 1, every bias 0, as DPImageBench's
    resnext.py."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, depth: int = 29, cardinality: int = 8,
                 widen: int = 4):
        super().__init__()
        if (depth - 2) % 9:
            raise ValueError(f"a ResNeXt's depth is 9n + 2, got {depth}")
        n = (depth - 2) // 9
        self.stem = nn.Sequential(conv3x3(in_channels, 64), nn.BatchNorm2d(64), nn.ReLU())
        blocks, cin = [], 64
        for width, stride in ((64 * widen, 1), (128 * widen, 2), (256 * widen, 2)):
            for i in range(n):
                blocks.append(Bottleneck(cin, width, stride if i == 0 else 1, cardinality, widen))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.kaiming_normal_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _wrn(depth: int, widen: int, in_channels: int, num_classes: int) -> nn.Module:
    net = WideResNet(in_channels, num_classes, depth=depth, widen=widen, dropout=0.3)
    nn.init.zeros_(net.head.bias)  # DPImageBench's wrn.py zeroes the linear bias (weight: PyTorch's default)
    return net


NETS = {
    "wrn": ("WRN-40-4, dropout 0.3", lambda c, k: _wrn(40, 4, c, k)),
    "resnet": ("ResNet-110", lambda c, k: CifarResNet(c, k, depth=110)),
    "resnext": ("ResNeXt-29 8x64d (widen 4)", lambda c, k: ResNeXt(c, k, depth=29, cardinality=8, widen=4)),
    "wrn16_2": ("WRN-16-2, dropout 0.3", lambda c, k: _wrn(16, 2, c, k)),
    "resnet20": ("ResNet-20", lambda c, k: CifarResNet(c, k, depth=20)),
    "resnext11": ("ResNeXt-11 2x64d (widen 2, 1 bottleneck per stage)",
                  lambda c, k: ResNeXt(c, k, depth=11, cardinality=2, widen=2)),
    "resnext11_8x64d": ("ResNeXt-11 8x64d (widen 4, 1 bottleneck per stage)",
                        lambda c, k: ResNeXt(c, k, depth=11, cardinality=8, widen=4)),
}


def build(name: str, in_channels: int = 1, num_classes: int = 10) -> nn.Module:
    if name not in NETS:
        raise ValueError(f"unknown classifier {name!r}; one of {sorted(NETS)}")
    return NETS[name][1](in_channels, num_classes)


def n_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def print_param_counts() -> None:
    for name, (title, _) in NETS.items():
        net = build(name)
        with torch.no_grad():
            out = net.eval()(torch.zeros(2, 1, 28, 28))
        print(f"{name:16s} {n_params(net):>11,d} parameters  {title}  (output {tuple(out.shape)})", flush=True)


def time_batches(name: str, batch: int = 256, reps: int = 2, warmup: int = 1) -> list[float]:
    """Seconds of each of `reps` training batches (forward, cross-entropy, backward, Adam step) after `warmup`."""
    torch.manual_seed(0)
    net = build(name).train()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    x, y = torch.rand(batch, 1, 28, 28) * 2 - 1, torch.randint(0, 10, (batch,))
    times = []
    for i in range(warmup + reps):
        start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time", help="comma-separated classifiers to time")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if not a.time:
        print_param_counts()
    for name in (a.time.split(",") if a.time else []):
        t = time_batches(name, a.batch, a.reps)
        per256 = sum(t) / len(t) * 256 / a.batch
        print(f"{name:10s} batch {a.batch}, {a.threads} thread(s): " + ", ".join(f"{s:.2f}" for s in t)
              + f" s per batch -> {per256:.2f} s per 256 -> {per256 * 55000 / 256:.0f} s per epoch of 55,000",
              flush=True)
