"""`python experiments/reference_rows.py`: real-data reference rows (the upper bounds the papers print) for MNIST
and Fashion-MNIST.

For each dataset: the domain classifier's test accuracy and training time (G-PATE appendix F),
IS of the real test set and FID of the real test set against the real train set with that
classifier, and the test accuracy of the appendix E CNN (`--classifier wrn`: the downstream WRN-16-2) trained on
the real training set (model selection on 10% of the training set). Data through the project's datamodules (`data=<name>`),
the domain classifier trained as the evaluation config says (`classifier_recipes`, cached as in training):

    python experiments/reference_rows.py --datasets mnist fashion_mnist --out reference_rows.json

`--limit N` keeps the first N training and test records (a quick check of the pipeline, not a reference row; its
domain classifier is trained on those records and not cached).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from dpgen.cli.common import CONF_DIR
from dpgen.evaluation.downstream import CNNS, image_accuracy
from dpgen.evaluation.fidelity import domain_classifier_for, image_quality

DATASETS = ("mnist", "fashion_mnist")


def reference_row(dataset: str, max_epochs: int, classifier_dir: str | None, limit: int | None = None,
                  downstream: str = "appendix_e") -> dict:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"data={dataset}"])
    dm = instantiate(cfg.data)
    dm.setup()
    train_x, train_y, test_x, test_y = (t[:limit] for t in (dm.train_data.x, dm.train_data.y,
                                                            dm.test_data.x, dm.test_data.y))
    recipe = instantiate(cfg.eval.callbacks.image_quality).recipe_for(dataset)
    uncached = limit is not None and classifier_dir is None  # a classifier of a subset must not enter the cache
    with tempfile.TemporaryDirectory() as scratch:
        classifier, info = domain_classifier_for(dataset, train_x, train_y, test_x, test_y, num_classes=dm.num_classes,
                                                 recipe=recipe, directory=scratch if uncached else classifier_dir)
    if uncached:
        info = {**info, "path": None}
    start = time.perf_counter()
    quality = image_quality(test_x, train_x, classifier)
    quality_seconds = time.perf_counter() - start
    start = time.perf_counter()
    cnn = image_accuracy(train_x, train_y, test_x, test_y, num_classes=dm.num_classes, max_epochs=max_epochs,
                         cnn=downstream)
    return {
        "dataset": dataset,
        # the cache lookup matched `recipe`; a file from before recipes has no flip / cosine entries of its own
        "classifier": {**{k: info.get(k) for k in ("hash", "test_accuracy", "train_seconds", "path")}, **recipe},
        "real_test_IS": quality["IS"],
        "real_test_vs_train_FID": quality["FID"],
        "quality_seconds": quality_seconds,
        "cnn_on_real": {**cnn, "classifier": downstream, "seconds": time.perf_counter() - start},
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--max-epochs", type=int, default=8, help="epochs of the appendix E CNN on real data")
    parser.add_argument("--classifier", choices=sorted(CNNS), default="appendix_e",
                        help="the downstream classifier trained on the real data (as eval.classifier)")
    parser.add_argument("--classifier-dir", default=None)
    parser.add_argument("--out", default=None, help="also write the rows as JSON")
    parser.add_argument("--limit", type=int, default=None, help="only the first N training and test records")
    args = parser.parse_args(argv)
    rows = [reference_row(d, args.max_epochs, args.classifier_dir, args.limit, args.classifier) for d in args.datasets]
    text = json.dumps(rows, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return rows


if __name__ == "__main__":
    main()
