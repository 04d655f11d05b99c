"""`python evaluate.py synthetic=<file> data=<name>`: evaluate any synthetic data set (ours, or made elsewhere in
the same format) against the real data, with the protocol of the evaluation callbacks (conf/eval)."""
from __future__ import annotations

import json
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from dpgen.cli.common import (CONF_DIR, USER_ERRORS, check_config, console, print_metrics, private_val_share,
                              run_job)
from dpgen.files import atomic_write_text


def load_synthetic(path: Path, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """`.npz` with arrays x (N, *shape) and y (N,), or `.csv` with the features then a `label` column
    (as generate.py writes them). Records are reshaped to the real data's shape."""
    if not path.is_file():
        raise FileNotFoundError(f"synthetic data file {path} does not exist")
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


def charge_selection(callback, generator: dict | None, dm) -> dict:
    """The line the private validation selections add to the release (privacy.selection), also printed: parallel
    composition only when the generator's privacy.json says its data excluded this very split."""
    held = ((generator or {}).get("records") or {}).get("private_val")
    report = callback.selection_privacy(generator, held == {"data": dm.name, "fraction": dm.private_val, "seed": dm.seed})
    release = report["release"]
    total = (f"with the generator's epsilon {release['generator_epsilon']:.4g}: epsilon {release['epsilon']:.4g} at "
             f"delta {release['delta']:g}, {release['composition']}" if "epsilon" in release else release["note"])
    console.print(f"charged: the epoch chosen on the private validation split ({report['mechanism']}) costs epsilon "
                  f"{report['epsilon']:.4g}; {total}", soft_wrap=True)
    return report


def run(cfg: DictConfig) -> dict:
    path = Path(cfg.synthetic)
    dm = instantiate(cfg.data, batch_size=256, seed=cfg.seed, private_val=private_val_share(cfg))
    dm.prepare_data()
    dm.setup("fit")
    x, y = load_synthetic(path, dm.shape)
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
        if getattr(callback, "selection", None) == "private_val" and callback.private_val_epsilon is None:
            if generator is None:
                raise ValueError(f"no privacy.json beside {path}: give the selection's budget, "
                                 "eval.private_val.epsilon=<eps>")
            callback.private_val_epsilon = generator["epsilon"]  # free under parallel composition
        results[name] = callback.evaluate_synthetic(x, y, dm, torch.device(device))
        if getattr(callback, "selections", 0):
            results["selection_privacy"] = charge_selection(callback, generator, dm)
    atomic_write_text(out, json.dumps(results, indent=2, default=float) + "\n")
    print_metrics(f"{path.name} on {dm.name}", results, out)
    return results


@hydra.main(config_path=str(CONF_DIR), config_name="evaluate", version_base="1.3")
def hydra_main(cfg: DictConfig) -> None:
    run_job(run, cfg, (*USER_ERRORS, FileNotFoundError, ValueError))


def main() -> None:
    """Entry point: a configuration mistake is one error line (exit 2); then Hydra runs the job."""
    check_config("evaluate")
    hydra_main()


if __name__ == "__main__":
    main()
