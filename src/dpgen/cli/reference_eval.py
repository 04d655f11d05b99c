"""`python -m dpgen.reference_eval RUN [RUN ...]`: the G-PATE authors' evaluation (`eval=reference`: their CNN, plain
SGD at their data set's learning rate, 600 epochs on 100,000 samples, the best real-test epoch) of released
generators: each run folder's generator.pt (a train.py run, or a kept run of docs/results) is sampled as its
method's authors sample it (G-PATE: BatchNorm on batches of its training batch, `method.reference_sample_batch_norm`),
and the classifiers of all runs train together (evaluation/stacked.py: one vectorized model on a GPU). Writes
<run>/eval_reference.json for each; a killed evaluation continues from its state file (`--state`; by default one per
set of runs) when called again with the same runs."""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from collections import Counter
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from dpgen.cli.common import CONF_DIR, config_file, console, fail, machine
from dpgen.cli.generate import load_release, sample
from dpgen.cli.report import REFERENCE_EVAL
from dpgen.evaluation.downstream import CNNS
from dpgen.evaluation.stacked import train_stacked
from dpgen.files import atomic_write_text

def authors_settings(data: str) -> dict:
    """The downstream settings of eval=reference for `data` (conf/eval/reference.yaml); ValueError where the
    authors have no script for it."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=["eval=reference", f"data={data}", "synthetic=unused"])
    settings = OmegaConf.to_container(cfg.eval.callbacks.downstream, resolve=True)
    if settings["lr"] is None:
        raise ValueError(f"{data}: the G-PATE authors' evaluation has scripts for mnist and fashion_mnist only")
    return {key: settings[key] for key in ("n_samples", "max_epochs", "batch_size", "lr", "cnn", "seed")} | {
        "data": cfg.data}


def run_config(run: Path):
    path = config_file(run)
    if path is None:
        raise FileNotFoundError(f"{run}: no config.yaml (a kept run) nor .hydra/config.yaml (a train.py run)")
    return OmegaConf.load(path)


def authors_samples(run: Path, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """n samples of the run's generator (its labels as generate.py draws them: balanced classes, or the release's
    class ratio), drawn as its method's authors draw them."""
    release, cfg = load_release(run), run_config(run)
    batch_norm = OmegaConf.select(cfg, "method.reference_sample_batch_norm", default=None)
    if batch_norm:
        release["sample_batch_norm"] = int(batch_norm)
    x, y = sample(release, n, seed, batch_size=1000)
    how = (f"BatchNorm on batches of {int(batch_norm)} samples, as the method's authors sample" if batch_norm
           else "as the run released it")
    return x, y, f"{n:,} samples of the run's generator.pt ({how}), seed {seed}"


def test_split(data_cfg) -> tuple[torch.Tensor, torch.Tensor]:
    dm = instantiate(data_cfg, batch_size=256, seed=0)
    dm.prepare_data()
    dm.setup("fit")
    return dm.test_data.x, dm.test_data.y


def identity(cells: list[dict]) -> str:
    """What the classifiers train on, named so that another machine names it alike: each run's generator file,
    its data set and the samples' settings (the samples themselves, drawn again there, may differ in their last
    bits)."""
    return "\n".join(f"{hashlib.sha256((cell['run'] / 'generator.pt').read_bytes()).hexdigest()} {cell['data']} "
                     f"{json.dumps(cell['settings'], sort_keys=True)} {cell['synthetic']}"
                     for cell in cells)


def evaluate_runs(runs: list[Path], device: str | None = None, state: Path | None = None, epochs: int | None = None,
                  n_samples: int | None = None, out: Path | None = None, patience: int | None = None) -> list[dict]:
    """The authors' evaluation of every run, the classifiers trained together; `epochs` / `n_samples` shorten it
    (a check, not the authors' number: then `out` must be given, and each result is written there as
    <run name>.json instead of into the run). `patience`: stop once every cell has gone that many epochs without a
    gain; the result, marked `stopped_early`, is a lower bound of the authors' number, and the state is kept, so that
    a call without `patience` continues to the authors' last epoch."""
    if (epochs is not None or n_samples is not None) and out is None:
        raise ValueError("a shortened evaluation is not the authors': give --out for its files")
    cells = []
    for run in runs:
        cfg = run_config(run)
        settings = authors_settings(cfg.data.name)
        settings["max_epochs"] = epochs or settings["max_epochs"]
        settings["n_samples"] = n_samples or settings["n_samples"]
        cells.append({"run": run, "data": cfg.data.name, "settings": settings})
    shared = {key: {str(c["settings"][key]) for c in cells} for key in ("n_samples", "max_epochs", "batch_size", "cnn")}
    if any(len(values) > 1 for values in shared.values()):
        raise ValueError(f"runs evaluated together need the same samples, epochs, batch and CNN: {shared}")
    models, xs, ys, test_xs, test_ys = [], [], [], [], []
    for cell in cells:
        s = cell["settings"]
        console.print(f"sampling {cell['run']}")
        x, y, cell["synthetic"] = authors_samples(cell["run"], s["n_samples"], s["seed"])
        test_x, test_y = test_split(s.pop("data"))
        with torch.random.fork_rng(devices=[]):  # the classifier's initial weights, as image_accuracy draws them
            torch.manual_seed(s["seed"])
            models.append(CNNS[s["cnn"]](x.shape[1], int(test_y.max()) + 1, tuple(x.shape[2:])))
        xs.append(x), ys.append(y), test_xs.append(test_x), test_ys.append(test_y)
    s = cells[0]["settings"]
    where = "gpu" if (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda") else "cpu"
    _, histories = train_stacked(models, xs, ys, test_xs, test_ys, lrs=[c["settings"]["lr"] for c in cells],
                                 seeds=[c["settings"]["seed"] for c in cells], max_epochs=s["max_epochs"],
                                 batch_size=s["batch_size"], device=device, progress=True, state_file=state,
                                 identity=identity(cells), machine=machine(where), patience=patience)
    results = []
    for cell, history in zip(cells, histories):
        tested = [record["test_accuracy"] for record in history]
        machines = Counter(record.pop("machine", "not recorded") for record in history)
        best = max(tested)
        partial = len(history) < cell["settings"]["max_epochs"]
        result = {
            "evaluation": "the G-PATE authors' (eval=reference): the highest real-test accuracy of the epochs"
                          + (f" run so far, a lower bound of theirs (stopped after {patience} epochs without a gain; "
                             "its state is kept, to continue)" if partial else ""),
            "synthetic": cell["synthetic"], "data": cell["data"], "records": cell["settings"]["n_samples"],
            "settings": cell["settings"],
            "downstream": {"accuracy": tested[-1], "max_test_accuracy": best, "max_test_epoch": 1 + tested.index(best),
                           "epochs_run": len(history), "n_train": cell["settings"]["n_samples"],
                           "history": [{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
                                       for r in history]},
            # where its epochs ran (an evaluation resumed on another machine: each machine's epochs)
            "machine": machines.most_common(1)[0][0], "epochs_by_machine": dict(machines),
            "stacked_with": len(cells),
            **({"stopped_early": {"patience": patience, "epochs_run": len(history),
                                  "of": cell["settings"]["max_epochs"]}} if partial else {}),
            # the epochs' training time in every process that ran them, shared by the cells
            "seconds_per_cell": round(sum(record["seconds"] for record in history) / len(cells), 1),
        }
        path = cell["run"] / REFERENCE_EVAL if out is None else out / f"{cell['run'].name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(result, indent=2) + "\n")
        console.print(f"{cell['run']}: best test accuracy {best:.4f} (epoch {result['downstream']['max_test_epoch']} "
                      f"of {len(history)}{', stopped early: a lower bound' if partial else ''}) -> {path}")
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders with a generator.pt")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    parser.add_argument("--state", type=Path, default=None,
                        help="the resumable state of the classifiers' training (removed when it ends; default: "
                             "outputs/reference_eval/<a digest of the runs' paths>.pt)")
    parser.add_argument("--epochs", type=int, default=None, help="fewer epochs than the authors' (a check; --out)")
    parser.add_argument("--n-samples", type=int, default=None, help="fewer samples than the authors' (a check; --out)")
    parser.add_argument("--out", type=Path, default=None, help="where a shortened evaluation writes its files")
    parser.add_argument("--patience", type=int, default=None,
                        help="stop once every run has gone this many epochs without a higher test accuracy: its "
                             "number is then a lower bound of the authors', marked so; the state is kept, and a call "
                             "without --patience continues to their last epoch")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(message)s")  # a handler where no import has set one up
    logging.getLogger("dpgen").setLevel(logging.INFO)  # each epoch's line (hours of them)
    if args.state is None:  # one file per set of runs: another set's evaluation never meets this one's state
        # the runs' paths from here (the repository root), so that a checkout elsewhere finds the same file
        runs = "\n".join(sorted(os.path.relpath(run.resolve(), Path.cwd().resolve()) for run in args.runs))
        args.state = Path("outputs/reference_eval") / f"{hashlib.sha256(runs.encode()).hexdigest()[:16]}.pt"
    try:
        return evaluate_runs(args.runs, args.device, args.state, args.epochs, args.n_samples, args.out, args.patience)
    except (FileNotFoundError, ValueError) as err:
        fail(str(err))


def cli() -> None:
    main()
