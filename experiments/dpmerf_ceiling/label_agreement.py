"""How often the shipped MNIST domain classifier (98.95% on the real test set) reads a DP-MERF run's synthetic
samples as the label they were drawn for: a seconds-long proxy of sample quality beside the downstream CNN, and a
check of how the generator's BatchNorm is used at sampling (running statistics, or the statistics of batches of
500 with mixed labels, as in training). Usage: label_agreement.py outputs/<run> [outputs/<run> ...]"""
import sys
from pathlib import Path

import torch

from dpgen.evaluation.fidelity import load_classifier
from dpgen.nn.generator import generate

CLASSIFIER = Path(__file__).resolve().parents[2] / "src/dpgen/evaluation/classifiers/mnist-0ad0cf6419fb744a.pt"


def main(runs):
    torch.set_num_threads(1)
    clf, _ = load_classifier(CLASSIFIER)
    clf.eval()
    for run in runs:
        rel = torch.load(Path(run) / "generator.pt", map_location="cpu", weights_only=False)
        labels = torch.randint(0, 10, (10_000,), generator=torch.Generator().manual_seed(0))
        out = {}
        for mode, bn in (("eval", None), ("batch500", 500)):
            torch.manual_seed(0)
            with torch.no_grad():
                x = generate(rel["generator"], labels, rel["z_dim"], rel["latent_dist"], 1000, bn)
                pred = torch.cat([clf(c).argmax(1) for c in x.split(1000)])
            out[mode] = (pred == labels).float().mean().item()
        print(f"{run}: agreement eval-mode {out['eval']:.4f}, batch-500 BatchNorm {out['batch500']:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
