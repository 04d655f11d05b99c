"""`python evaluate.py synthetic=<file> data=<name>`: evaluate any synthetic data set (ours, or made elsewhere in
the same format) against the real data, with the protocol of the evaluation callbacks (conf/eval)."""
from __future__ import annotations

import json
from pathlib import Path

import hydra
import numpy as np
import pandas as pd
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from dpgen.cli.common import (CONF_DIR, USER_ERRORS, check_config, console, data_hash, print_metrics,
                              private_val_share, run_job)
from dpgen.files import atomic_write_text, read_json_lines
from dpgen.privacy.selection import earlier_charges


def in_file_layout(path: Path, dm) -> bool:
    """Whether a CSV has the columns of the table's own file (its label and every feature column, as generate.py
    writes a table and as the real data comes), rather than encoded records."""
    if not hasattr(dm, "read_frame"):
        return False
    header = set(pd.read_csv(path, nrows=0).columns)
    return dm.label in header and set(dm.features) <= header


def load_synthetic(path: Path, shape: tuple[int, ...], dm=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`.npz` with arrays x (N, *shape) and y (N,), or `.csv` with the features then a `label` column
    (encoded records, as generate.py writes images). Records are reshaped to the real data's shape. A table's
    `.csv` with the columns of its own file (generate.py's tables, or the real training file itself: the real-data
    row) is encoded and scaled by the datamodule `dm`, as its own splits."""
    if not path.is_file():
        raise FileNotFoundError(f"synthetic data file {path} does not exist")
    if path.suffix == ".csv" and dm is not None and in_file_layout(path, dm):
        data = dm.records(pd.read_csv(path, low_memory=False), path)
        return data.x.reshape(len(data.y), *shape), data.y
    if path.suffix == ".npz":
        with np.load(path) as f:
            if "x" not in f or "y" not in f:
                raise ValueError(f"{path}: an .npz needs arrays 'x' and 'y', found {sorted(f.files)}")
            x, y = f["x"], f["y"]
    elif path.suffix == ".csv":
        table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
        x, y = table[:, :-1], table[:, -1]
    else:
        raise ValueError(f"{path}: use a .npz (x, y) or a .csv (features, label)")
    if len(x) != len(y) or x[0].size != int(np.prod(shape)):
        raise ValueError(f"{path}: {len(x)} records of {x[0].size} values and {len(y)} labels; the real data has "
                         f"records of shape {shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{path}: non-finite values in x")
    return torch.as_tensor(x, dtype=torch.float32).reshape(len(x), *shape), torch.as_tensor(y).long()


SELECTION_LOG = "selections.jsonl"  # beside the synthetic file: every private validation selection made on it


def prepare_selection(callback, generator: dict | None, dm, folder: Path) -> None:
    """Set up `callback`'s private validation selection on this release: the charges made on it before (the
    generator's privacy.json, then the append-only SELECTION_LOG beside the synthetic file, where this selection is
    charged before it is made), whether the split is the one the generator's privacy.json names as held out from
    its training records (same data set, share, seed and data configuration hash: then parallel composition, else
    sequential), and, unless given, the selection's epsilon: the generator's configured budget (public), never the
    epsilon it spent (a data-dependent number under G-PATE's and PATE-GAN's default bound)."""
    held = ((generator or {}).get("records") or {}).get("private_val")
    callback.disjoint_from_generator = held is not None and held == dm.private_val_split_descriptor
    callback.charged_by, callback.charge_log = "evaluate.py", str(folder / SELECTION_LOG)
    callback.earlier = [*earlier_charges(generator), *read_json_lines(folder / SELECTION_LOG)]
    if callback.private_val_epsilon is None:
        budget = ((generator or {}).get("budget") or {}).get("epsilon")
        if budget is None:
            where = "no privacy.json beside the synthetic file" if generator is None else \
                "the privacy.json beside the synthetic file states no budget (a generator without a guarantee)"
            raise ValueError(f"{where}: give the selection's budget, eval.private_val.epsilon=<eps>")
        callback.private_val_epsilon = float(budget)


def print_selection(report: dict) -> None:
    release = report["release"]
    total = (f"with the generator's epsilon {release['generator_epsilon']:.4g} ({release['bound']}): epsilon "
             f"{release['epsilon']:.4g} at delta {release['delta']:g}, {release['composition']}"
             if "epsilon" in release else release["note"])
    console.print(f"charged: the epoch chosen on the private validation split ({report['mechanism']}) costs epsilon "
                  f"{report['charges'][-1]['epsilon']:.4g}; this release's {report['selections']} selection(s) "
                  f"{report['epsilon']:.4g} in all; {total}", soft_wrap=True)


def run(cfg: DictConfig) -> dict:
    path = Path(cfg.synthetic)
    dm = instantiate(cfg.data, batch_size=256, seed=cfg.seed, private_val=private_val_share(cfg),
                     data_hash=data_hash(cfg))
    dm.prepare_data()
    dm.setup("fit")
    x, y = load_synthetic(path, dm.shape, dm)
    if int(y.min()) < 0 or int(y.max()) >= dm.num_classes:
        raise ValueError(f"{path}: labels must be in 0..{dm.num_classes - 1} ({dm.name}), got {int(y.min())}..{int(y.max())}")
    device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    results = {"synthetic": str(path), "data": dm.name, "records": len(y)}
    out = Path(cfg.out) if cfg.out else path.with_suffix(".eval.json")
    privacy = path.parent / "privacy.json"
    generator = json.loads(privacy.read_text()) if privacy.is_file() else None
    if generator is not None:
        results["privacy"] = generator
    for name, node in (cfg.eval.get("callbacks") or {}).items():
        console.print(f"evaluating: {name}")
        callback = instantiate(node)
        if hasattr(callback, "state_file") and callback.state_file is None:  # a killed run continues from here
            callback.state_file = str(out.with_name(f"{out.name}.{name}-state.pt"))
        if getattr(callback, "selection", None) == "private_val":
            prepare_selection(callback, generator, dm, path.parent)
        results[name] = callback.evaluate_synthetic(x, y, dm, torch.device(device))
        if hasattr(callback, "settings") and x.dim() == 4:  # what makes the number one protocol's (report.py)
            results[name]["settings"] = {**callback.settings(), "n_samples": len(y)}  # the file's, all of it
        if getattr(callback, "charges", None):
            results["selection_privacy"] = callback.selection_privacy(generator)
            print_selection(results["selection_privacy"])
    atomic_write_text(out, json.dumps(results, indent=2, default=float) + "\n")
    print_metrics(f"{path.name} on {dm.name}", results, out)
    return results


@hydra.main(config_path=str(CONF_DIR), config_name="evaluate", version_base="1.3")
def hydra_main(cfg: DictConfig) -> None:
    run_job(run, cfg, (*USER_ERRORS, FileNotFoundError, ValueError))  # SelectionBudgetError is a ValueError


def main() -> None:
    """Entry point: a configuration mistake is one error line (exit 2); then Hydra runs the job."""
    check_config("evaluate")
    hydra_main()


if __name__ == "__main__":
    main()
