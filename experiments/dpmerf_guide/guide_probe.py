"""Probe (issue 84): how good can the guide get on Fashion-MNIST? Trains methods/guide.py's net with the project's
DP-SGD at the noise a guided run of budget EPS plans (two_stage.plan, release share 0.5; EPS=0: no noise, clipping
kept), prints its real-test accuracy; with --generator RUN, also relabels 60,000 samples of RUN's generator by it and
scores them with the downstream CNN (--cnn-epochs, synthetic hold-out selection).
Usage: guide_probe.py --data fashion_mnist --eps 1 --epochs 8 --batch 512 --lr 2 --clip 0.1 [--generator RUN]"""
import argparse
import time
from pathlib import Path

import torch

from dpgen.aggregation.mean_embedding import sensitivity
from dpgen.cli.generate import load_release
from dpgen.evaluation.downstream import image_accuracy
from dpgen.methods.guide import guide_net, relabel, train_dpsgd
from dpgen.nn.generator import generate
from dpgen.privacy import two_stage
from probe_data import datamodule  # noqa: E402 (this folder's)

ap = argparse.ArgumentParser()
ap.add_argument("--data", default="fashion_mnist")
ap.add_argument("--eps", type=float, default=1.0)
ap.add_argument("--epochs", type=float, default=8)
ap.add_argument("--batch", type=int, default=512)
ap.add_argument("--lr", type=float, default=2.0)
ap.add_argument("--momentum", type=float, default=0.9)
ap.add_argument("--clip", type=float, default=0.1)
ap.add_argument("--generator")
ap.add_argument("--cnn-epochs", type=int, default=5)
a = ap.parse_args()
dm = datamodule(a.data, private_val=True)
x, y = dm.train_data[:]
tx, ty = dm.test_data[:]
plan = two_stage.plan(a.eps if a.eps else 1e4, 1e-5, sensitivity(0.2), 0.5, a.batch, a.epochs, len(x))
noise = plan["noise_multiplier"] if a.eps else 0.0
torch.manual_seed(0)
net = guide_net("image", tuple(x.shape[1:]), 10)
start = time.time()
train_dpsgd(net, x, y, steps=plan["steps"], batch_size=a.batch, lr=a.lr, momentum=a.momentum, clip=a.clip,
            noise_multiplier=noise)
with torch.no_grad():
    acc = (relabel(net, tx) == ty).float().mean().item()
print(f"RESULT {vars(a)} steps {plan['steps']} noise {noise:.3f}: guide test accuracy {acc:.4f} "
      f"({time.time() - start:.0f} s)", flush=True)
if a.generator:
    release = load_release(Path(a.generator))
    torch.manual_seed(0)
    labels = torch.arange(60000) % 10
    sx = generate(release["generator"], labels, release["z_dim"], release["latent_dist"], 1000, None)
    sy = relabel(net, sx)
    out = image_accuracy(sx, sy, tx, ty, num_classes=10, max_epochs=a.cnn_epochs)
    print(f"RESULT downstream {out['accuracy']:.4f} (synthetic hold-out, {a.cnn_epochs} CNN epochs)", flush=True)
