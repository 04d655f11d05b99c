"""Real-data reference rows (the upper bounds the papers print) for MNIST and Fashion-MNIST.

For each dataset: the domain classifier's test accuracy and training time (G-PATE appendix F),
IS of the real test set and FID of the real test set against the real train set with that
classifier, and the test accuracy of the appendix E CNN trained on the real training set
(model selection on 10% of the training set). Reads the offline copies of DESIGN.md:

    .venv/bin/python scripts/reference_rows.py --datasets mnist fashion_mnist --out reference_rows.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import time
from pathlib import Path

import numpy as np
import torch

from dpgen.evaluation.downstream import image_accuracy
from dpgen.evaluation.fidelity import domain_classifier_for, image_quality

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def mnist() -> tuple:
    import mnist as package

    with gzip.open(Path(package.__file__).parent / "data" / "mnist.pkl.gz") as f:
        train, valid, test = pickle.load(f, encoding="latin1")
    x = np.concatenate([train[0], valid[0]])
    y = np.concatenate([train[1], valid[1]])
    return (torch.tensor(x).view(-1, 1, 28, 28), torch.tensor(y).long(),
            torch.tensor(test[0]).view(-1, 1, 28, 28), torch.tensor(test[1]).long())


def idx(path: Path) -> np.ndarray:
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist() -> tuple:
    def images(name):
        return torch.tensor(idx(FASHION_DIR / name).astype(np.float32) / 255.0).unsqueeze(1)

    def labels(name):
        return torch.tensor(idx(FASHION_DIR / name).astype(np.int64))

    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


LOADERS = {"mnist": mnist, "fashion_mnist": fashion_mnist}


def reference_row(dataset: str, classifier_epochs: int, max_epochs: int, classifier_dir: str | None) -> dict:
    train_x, train_y, test_x, test_y = LOADERS[dataset]()
    classifier, info = domain_classifier_for(
        dataset, train_x, train_y, test_x, test_y, num_classes=10, directory=classifier_dir, epochs=classifier_epochs
    )
    start = time.perf_counter()
    quality = image_quality(test_x, train_x, classifier)
    quality_seconds = time.perf_counter() - start
    start = time.perf_counter()
    cnn = image_accuracy(train_x, train_y, test_x, test_y, num_classes=10, max_epochs=max_epochs)
    return {
        "dataset": dataset,
        "classifier": {k: info[k] for k in ("hash", "test_accuracy", "train_seconds", "epochs", "path")},
        "real_test_IS": quality["IS"],
        "real_test_vs_train_FID": quality["FID"],
        "quality_seconds": quality_seconds,
        "cnn_on_real": {**cnn, "seconds": time.perf_counter() - start},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(LOADERS), choices=list(LOADERS))
    parser.add_argument("--classifier-epochs", type=int, default=3)
    parser.add_argument("--max-epochs", type=int, default=8, help="epochs of the appendix E CNN on real data")
    parser.add_argument("--classifier-dir", default=None)
    parser.add_argument("--out", default=None, help="also write the rows as JSON")
    args = parser.parse_args()
    rows = [reference_row(d, args.classifier_epochs, args.max_epochs, args.classifier_dir) for d in args.datasets]
    text = json.dumps(rows, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
