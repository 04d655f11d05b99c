"""`python experiments/label_agreement.py <run> [--n 10000]`: how many of a generator's samples look like their
label to a classifier trained on the real data (the domain classifier shipped with dpgen, the one IS / FID use),
per class with what they are taken for. The samples are drawn as `python -m dpgen.reference_eval` draws them (its
method's authors' way: G-PATE's BatchNorm on batches of its training batch), so the number sits beside that
evaluation's: where the two differ, the samples carry class information that the real data's classifier does not
read but a classifier trained on them does (docs/LOG.md, "The authors' evaluation: cost")."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from dpgen.cli.reference_eval import authors_samples, run_config
from dpgen.evaluation.fidelity import SHIPPED, load_classifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder with a generator.pt")
    parser.add_argument("--n", type=int, default=10_000, help="samples (default 10,000)")
    args = parser.parse_args()
    data = run_config(args.run).data.name
    shipped = sorted(SHIPPED.glob(f"{data}-*.pt"))
    if not shipped:
        raise SystemExit(f"error: no classifier of {data} is shipped with dpgen ({SHIPPED})")
    model, info = load_classifier(shipped[0])
    x, y, how = authors_samples(args.run, args.n, 0)
    with torch.no_grad():
        taken = torch.cat([model.eval()(x[i:i + 1000]).argmax(1) for i in range(0, len(x), 1000)])
    classes = int(y.max()) + 1
    result = {"run": str(args.run), "samples": how, "classifier": shipped[0].name,
              "classifier_test_accuracy": info.get("test_accuracy"),
              "agreement": (taken == y).float().mean().item(),
              "per_class": {c: {"agreement": (taken[y == c] == c).float().mean().item(),
                                "taken_for": torch.bincount(taken[y == c], minlength=classes).tolist()}
                            for c in range(classes)}}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
