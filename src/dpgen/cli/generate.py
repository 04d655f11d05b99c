"""`python generate.py run=<run folder> n=60000 format=npz|csv|png`: a synthetic data set from a released
generator, with the run's privacy.json copied beside it. Sampling is post-processing: it costs no privacy.

format=csv of a table: the columns of the original file (its feature names, then its label column), continuous
values in their units and categories and labels as the file writes them (`dpgen.data.tables.decode`), so that the
synthetic file reads like the real one; evaluate.py reads it back. The table's schema comes from the release
(`table_schema`) or else from the run's recorded data configuration (<run>/.hydra/config.yaml, or a kept run's
<run>/config.yaml). Images, and tables whose schema cannot be had, are written as the encoded records (`x0..` or
the feature names, then `label`)."""
from __future__ import annotations

import shutil
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.progress import track
from torchvision.utils import save_image

from dpgen.cli.common import CONF_DIR, check_config, config_file, console, run_job
from dpgen.data.errors import DataError
from dpgen.data.tables import decode
from dpgen.methods.guide import relabel
from dpgen.nn.generator import generate

FORMATS = ("npz", "csv", "png")


def load_release(run: Path) -> dict:
    path = run / "generator.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: `run=` must be a folder written by train.py")
    release = torch.load(path, map_location="cpu", weights_only=False)  # our own file: a pickled module
    modules = [release[key] for key in ("generator", "labeller") if release.get(key) is not None]
    if any(vars(param) for module in modules for param in module.parameters()):
        raise ValueError(f"{path}: its guide carries the per-record gradients of its last DP-SGD batch (written "
                         "before 2026-12-06's fix of methods/guide.py): the file holds private records; delete it "
                         "and train the run again")
    release["generator"] = release["generator"].float()  # a kept run stores it in half precision (report.keep)
    if release.get("labeller") is not None:
        release["labeller"] = release["labeller"].float()
    return release


def sample(release: dict, n: int, seed: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    probs = release["class_probs"]
    labels = (torch.arange(n) % release["num_classes"] if probs is None
              else torch.multinomial(torch.tensor(probs), n, replacement=True))
    x = generate(release["generator"], labels, release["z_dim"], release["latent_dist"], batch_size,
                 release.get("sample_batch_norm"))
    if release.get("labeller") is not None:  # DP-MERF's guide in mode=relabel (methods/guide.py)
        labels = relabel(release["labeller"], x, batch_size, release.get("labeller_shares"))
    return x, labels


def table_schema(release: dict, run: Path) -> dict | None:
    """The table's schema (CSVDataModule.schema): the release's, else rebuilt from the run's recorded data
    configuration (set up first only for scaling=fit, whose ranges are the training split's); None for images or
    when neither is there (a note says why)."""
    if release.get("kind") != "table":
        return None
    if release.get("table_schema"):
        return release["table_schema"]
    recorded = config_file(run)
    if recorded is None:  # a kept run (python -m dpgen.report --keep) has its config.yaml at the top
        console.print(f"[yellow]note:[/] neither {run / '.hydra' / 'config.yaml'} nor {run / 'config.yaml'} exists: "
                      "the CSV has the encoded columns, not the file's", soft_wrap=True)
        return None
    cfg = OmegaConf.load(recorded)
    try:
        dm = instantiate(cfg.data, batch_size=1, n_teachers=1, seed=int(cfg.get("seed", 0)),
                         allow_data_dependent_preprocessing=not cfg.method.private)
        if not hasattr(dm, "schema"):
            return None
        if dm.scaling == "fit":
            dm.setup("fit")
        return dm.schema()
    except DataError as err:
        console.print(f"[yellow]note:[/] the CSV has the encoded columns: the run's data configuration gave no "
                      f"schema ({str(err).splitlines()[0]})", soft_wrap=True)
        return None


def write(x: torch.Tensor, y: torch.Tensor, release: dict, fmt: str, out: Path, schema: dict | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    names = release["class_names"]
    if fmt == "npz":
        path = out / "synthetic.npz"
        np.savez_compressed(path, x=x.numpy(), y=y.numpy(), class_names=np.array(names))
    elif fmt == "csv" and schema is not None:
        path = out / "synthetic.csv"
        decode(x.reshape(len(x), -1), y, schema).to_csv(path, index=False, float_format="%.6g")
    elif fmt == "csv":
        path = out / "synthetic.csv"
        flat = x.reshape(len(x), -1).numpy()
        columns = release.get("feature_names") or [f"x{i}" for i in range(flat.shape[1])]
        with path.open("w") as f:
            f.write(",".join([*columns, "label"]) + "\n")
            for row, label in zip(flat, y.tolist()):
                f.write(",".join(f"{v:.6g}" for v in row) + f",{label}\n")
    else:
        if release["kind"] != "image":
            raise ValueError("format=png is for image data; use csv or npz for tables")
        path = out / "images"
        for c, name in enumerate(names):
            (path / str(name)).mkdir(parents=True, exist_ok=True)
        for i, (img, label) in enumerate(track(list(zip(x, y.tolist())), description="writing PNGs")):
            save_image(img, path / str(names[label]) / f"{i:06d}.png")
    return path


def run(cfg: DictConfig) -> Path:
    if cfg.format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {cfg.format!r}")
    if int(cfg.n) < 1:
        raise ValueError(f"n must be >= 1, got {cfg.n}")
    run_dir = Path(cfg.run)
    release = load_release(run_dir)
    if cfg.get("sample_batch_norm") is not None:
        b = int(cfg.sample_batch_norm)
        if b == 1 or b < 0:
            raise ValueError(f"sample_batch_norm must be 0 (running statistics) or a batch size >= 2, got {b}")
        release["sample_batch_norm"] = b or None
    x, y = sample(release, int(cfg.n), int(cfg.seed), int(cfg.batch_size))
    out = Path(cfg.out) if cfg.out else run_dir / "synthetic"
    schema = table_schema(release, run_dir) if cfg.format == "csv" else None
    path = write(x, y, release, cfg.format, out, schema)
    privacy = run_dir / "privacy.json"
    if privacy.is_file():
        shutil.copy(privacy, out / "privacy.json")
    else:
        console.print(f"[yellow]note:[/] {privacy} does not exist (non-private method): no privacy report copied")
    console.print(f"{len(y)} synthetic records of {release['data_name']} -> {path}")
    return path


@hydra.main(config_path=str(CONF_DIR), config_name="generate", version_base="1.3")
def hydra_main(cfg: DictConfig) -> None:
    run_job(run, cfg, (FileNotFoundError, ValueError))


def main() -> None:
    """Entry point: a configuration mistake is one error line (exit 2); then Hydra runs the job."""
    check_config("generate")
    hydra_main()


if __name__ == "__main__":
    main()
