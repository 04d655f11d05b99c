"""Relabel or keep the labels of a guided DP-MERF run's samples, then the probe protocol (5 CNN epochs, synthetic
hold-out selection, real MNIST test set); also prints the run's guide's accuracy on the real test set.
Usage: relabel_probe.py RUN relabel|keep   (RUN: a run folder whose generator.pt holds a guide)"""
import sys

import torch

from dpgen.data.mnist import MNISTDataModule
from dpgen.evaluation.downstream import image_accuracy
from dpgen.nn.generator import generate


def main(run: str, mode: str):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dm = MNISTDataModule(batch_size=500)
    dm.setup()
    rel = torch.load(f"{run}/generator.pt", weights_only=False)
    guided = rel["generator"].float()  # a filter-mode run: GuidedGenerator(net, guide)
    net, guide = guided.net, guided.guide
    tx, ty = dm.test_data[:]
    with torch.no_grad():
        print("guide test accuracy", (torch.cat([guide(c).argmax(1) for c in tx.split(1000)]) == ty).float().mean().item())
        y = torch.arange(60_000) % 10
        x = generate(net, y, rel["z_dim"], rel["latent_dist"], 1000, None)
        pred = torch.cat([guide(c).argmax(1) for c in x.split(1000)])
    print("samples the guide reads as their label", (pred == y).float().mean().item(), flush=True)
    if mode == "relabel":
        y = pred
    ev = image_accuracy(x, y, tx, ty, num_classes=10, max_epochs=5, progress=False)
    print(mode, ev["accuracy"], ev["max_test_accuracy"], [round(h["test_accuracy"], 4) for h in ev["history"]])


if __name__ == "__main__":
    main(*sys.argv[1:3])
