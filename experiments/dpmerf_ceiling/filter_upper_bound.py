"""What a class-discriminative signal would buy: 60,000 samples of a DP-MERF run's generator (uniform labels), the
ones the shipped MNIST domain classifier (98.95%, trained on the real data: NOT private) reads as another class
dropped and replaced by fresh draws, then the downstream CNN (5 epochs, synthetic hold-out selection) on the real
test set (compare with the run's own synthetic-selection accuracy). An upper bound for filtering with a DP-trained
classifier. Usage: filter_upper_bound.py outputs/<run>"""
import sys
from pathlib import Path

import torch

from dpgen.data.mnist import MNISTDataModule
from dpgen.evaluation.downstream import image_accuracy
from dpgen.evaluation.fidelity import load_classifier
from dpgen.nn.generator import generate

CLASSIFIER = Path(__file__).resolve().parents[2] / "src/dpgen/evaluation/classifiers/mnist-0ad0cf6419fb744a.pt"


def main(run: str, n: int = 60_000):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    clf, _ = load_classifier(CLASSIFIER)
    clf.eval()
    rel = torch.load(Path(run) / "generator.pt", map_location="cpu", weights_only=False)
    dm = MNISTDataModule(batch_size=500)
    dm.setup()
    test_x, test_y = dm.test_data[:]
    kept_x, kept_y, drawn = [], [], 0
    with torch.no_grad():
        while sum(len(y) for y in kept_y) < n:
            y = torch.arange(10_000) % 10
            x = generate(rel["generator"], y, rel["z_dim"], rel["latent_dist"], 1000, None)
            drawn += len(y)
            ok = torch.cat([clf(c).argmax(1) for c in x.split(1000)]) == y
            kept_x.append(x[ok])
            kept_y.append(y[ok])
    fx, fy = torch.cat(kept_x)[:n], torch.cat(kept_y)[:n]
    print(f"kept {n} of {drawn} drawn ({n / drawn:.3f})", flush=True)
    out = image_accuracy(fx, fy, test_x, test_y, num_classes=10, max_epochs=5, progress=False)
    print(f"filtered: downstream accuracy {out['accuracy']:.4f} (synthetic hold-out selection; max over epochs "
          f"{out['max_test_accuracy']:.4f})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
