"""`python -m dpgen.report <multirun dir | run dirs ...> [--out DIR]`: compare finished runs.

Every folder below the given paths that holds a run (`metrics.json` and `.hydra/config.yaml`, as train.py
writes them, or `metrics.json` and `config.yaml`, as `--keep` stores them) is one row. Writes into `--out`
(default: the first path):
- `report.md`: method x dataset x epsilon budget: utility (image accuracy with the classifier's epoch chosen on the
  synthetic hold-out, on the private validation split and on the real test set, side by side, "-" where a run has
  none; or the mean AUROC / AUPRC of the tabular models), IS, FID, epsilon spent under each bound, steps, wall time, peak memory, machine, command and
  run folder; if `--out` holds a `RESULTS.md`, the table replaces the block between its `<!-- report -->` and
  `<!-- /report -->` lines instead, and if a given path holds a `comparison.yaml`, the comparison table it
  describes (the papers' shape: methods x data x epsilon, each cell a named run's three accuracies beside the
  paper's number) replaces the block between `<!-- comparison -->` and `<!-- /comparison -->`, and the plots
  below draw only those cells' runs;
- `utility_vs_epsilon.png`: utility against the budget, one line per method and dataset (as G-PATE figure 2);
  non-private runs (eps = inf) as dashed horizontal lines, noise-free controls of private methods
  (`method.private=false`) not drawn; `--accuracy synthetic|private_val|test` chooses which
  image accuracy it draws;
- `samples.png`: the final sample grid of every image run, titled by method, dataset and budget;
- `authors_eval.png` (with a `comparison.yaml`): each cell's epochs under the G-PATE authors' evaluation, beside
  the paper's number.

`python -m dpgen.report --keep <run dir> docs/results/<name>` stores the small files of a run (metrics.json,
privacy.json, the resolved config.yaml and overrides.yaml, the final sample grid, the generator in half precision
up to KEEP_GENERATOR_MB) so the row can be regenerated, and the generator evaluated again, without the run folder;
`<name>` must be new.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from dpgen.cli.common import CONF_DIR, config_file, console, fail  # noqa: E402
from dpgen.cli.generate import load_release  # noqa: E402
from dpgen.files import atomic_write  # noqa: E402
from dpgen.privacy.selection import NOT_DP, dp_epsilon  # noqa: E402


def find_runs(paths: list[Path]) -> list[Path]:
    """Run folders below `paths` (a run folder itself counts), sorted."""
    runs = set()
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such run or multirun folder")
        runs |= {p.parent for p in path.rglob("metrics.json") if config_file(p.parent)}
    return sorted(runs)


def command(run: Path, metrics: dict) -> str | None:
    """The command a run recorded, else `python train.py` with the overrides Hydra stored."""
    if metrics.get("command"):
        return metrics["command"]
    overrides = next((p for p in (run / ".hydra" / "overrides.yaml", run / "overrides.yaml") if p.exists()), None)
    return None if overrides is None else " ".join(["python train.py", *OmegaConf.load(overrides)])


def final_grid(run: Path) -> Path:
    grids = sorted((run / "samples").glob("*.png")) if (run / "samples").is_dir() else []
    return next((g for g in grids if g.name == "final.png"), grids[-1] if grids else run / "samples" / "final.png")


# The largest generator a kept run holds (its file in half precision): enough for DP-MERF's (0.5 MB) and the G-PATE
# paper cells' generators, so that a later evaluation (eval=reference, generate.py) needs no retraining, while
# docs/results stays quick to clone.
KEEP_GENERATOR_MB = 16.0


def keep_generator(source: Path, dest: Path) -> str:
    """Write the run's generator.pt to `dest` with its floating-point weights and buffers in half precision (what
    generate.py reads back in float32), unless that exceeds KEEP_GENERATOR_MB; says what it did."""
    release = load_release(source.parent)  # float32; refuses a file that holds private records
    release["generator"] = release["generator"].half()
    if release.get("labeller") is not None:
        release["labeller"] = release["labeller"].half()
    release["stored_precision"] = "float16"
    buffer = io.BytesIO()
    torch.save(release, buffer)
    size = buffer.tell() / 2**20
    if size > KEEP_GENERATOR_MB:
        return f"generator not kept: {size:.1f} MB in half precision, over the {KEEP_GENERATOR_MB:g} MB of a kept run"
    atomic_write(dest, lambda f: f.write(buffer.getvalue()))
    return f"generator kept in half precision ({size:.2f} MB)"


def keep(run: Path, dest: Path) -> Path:
    """Copy the small files of a finished run into `dest`, a new folder (a kept run's name is never reused): its
    metrics, privacy report, configuration, final sample grid and, in half precision, its generator (no
    checkpoints)."""
    if not (run / "metrics.json").exists() or config_file(run) is None:
        raise FileNotFoundError(f"{run}: not a finished run (metrics.json and .hydra/config.yaml)")
    if (dest / "metrics.json").exists():
        raise ValueError(f"{dest} already holds a kept run: kept runs are never overwritten, give this one a new name")
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.json", "privacy.json"):
        if (run / name).exists():
            shutil.copyfile(run / name, dest / name)
    shutil.copyfile(config_file(run), dest / "config.yaml")
    if (run / ".hydra" / "overrides.yaml").exists():
        shutil.copyfile(run / ".hydra" / "overrides.yaml", dest / "overrides.yaml")
    if final_grid(run).exists():
        (dest / "samples").mkdir(exist_ok=True)
        shutil.copyfile(final_grid(run), dest / "samples" / "final.png")
    if (run / "generator.pt").exists():
        console.print(keep_generator(run / "generator.pt", dest / "generator.pt"))
    return dest


# The image accuracies of the three ways to choose the classifier's epoch (docs/EVALUATION.md), as the table heads them
# (the private validation choice is DP when the run's generator is: its "guarantee" column says)
ACCURACIES = {"synthetic": "accuracy (synthetic hold-out)", "private_val": "accuracy (private val selection)",
              "test": "accuracy (test-chosen, not DP)"}


def utility(downstream: dict) -> dict:
    """Images: the accuracy of each protocol in ACCURACIES, None where the run has none (runs before the three
    protocols: `accuracy` is the hold-out's and `max_test_accuracy`, where present, the test-chosen one).
    Tables: {"auroc": .., "auprc": ..} (mean over the tabular models)."""
    if "accuracy" in downstream:
        before = {"synthetic": downstream["accuracy"], "test": downstream.get("max_test_accuracy")}
        return {key: (downstream[key] or {}).get("accuracy") if key in downstream else before.get(key)
                for key in ACCURACIES}
    average = downstream.get("average") or downstream.get("B", {}).get("average")  # ranking=true: setting B
    return dict(average) if average else {}


def guarantee(privacy: dict | None, private: bool) -> dict:
    """What a run's own privacy.json promises: {"kind": "DP" | "data-dependent" | "none" | "unknown", "label":
    text, "dp": the DP epsilon or None}. A run that is not private (a noise-free control, a method without a
    guarantee: the budget column says why, budget_cell) promises nothing; a run stopped by a data-dependent bound
    (or GS-WGAN's as-published count) promises its DP bound, named beside it."""
    if not private or (privacy is not None and (privacy.get("guarantee") == "none" or not privacy.get("private", True))):
        return {"kind": "none", "label": "none", "dp": None}
    if privacy is None or "epsilon" not in privacy:
        return {"kind": "unknown", "label": "unknown (no privacy.json)", "dp": None}
    epsilon, bound = dp_epsilon(privacy)
    if privacy.get("governing_bound") in NOT_DP:
        return {"kind": "data-dependent", "dp": epsilon,
                "label": f"data-dependent eps {privacy['epsilon']:.3g} (not DP); DP eps {epsilon:.3g} ({bound})"}
    return {"kind": "DP", "label": f"DP eps {epsilon:.3g}", "dp": epsilon}


def load_run(path: Path) -> dict:
    metrics = json.loads((path / "metrics.json").read_text())
    cfg = OmegaConf.load(config_file(path))
    # a private method run with method.private=false (a noise-free control or an ablation) keeps a ledger but had no budget
    control = metrics.get("privacy", {}).get("private", False) and not OmegaConf.select(cfg, "method.private",
                                                                                         default=True)
    private = metrics.get("privacy", {}).get("private", False) and not control
    budget = OmegaConf.select(cfg, "privacy.epsilon", default=None)
    privacy = json.loads((path / "privacy.json").read_text()) if (path / "privacy.json").is_file() else None
    quality = metrics.get("image_quality", {})
    return {"method": cfg.method.name, "data": cfg.data.name, "control": control,
            "budget": float(budget) if private and budget is not None else math.inf,
            "claimed": metrics.get("privacy", {}).get("claimed_epsilon"),  # a reproduced code's claim, no guarantee
            "guarantee": guarantee(privacy, private),
            "spent": metrics.get("privacy", {}).get("epsilon", {}), "utility": utility(metrics.get("downstream", {})),
            "IS": quality.get("IS"), "FID": quality.get("FID"), "steps": metrics.get("steps"),
            "wall_time": wall_time(metrics), "peak_rss_gb": peak_rss(metrics),
            "machine": metrics.get("machine"), "command": command(path, metrics), "grid": final_grid(path),
            "path": path}


def number(value, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}g}"


def wall_time(metrics: dict) -> str:
    """The run's wall time; for a resumed run, that of its last process and the training time of all of them."""
    clock = metrics.get("run_clock") or {}
    cell = number(metrics.get("wall_time_s"), 5)
    if clock.get("processes", 1) > 1:
        cell += f" (last process; training {clock['train_s_total']:.0f} over {clock['processes']} processes)"
    return cell


def peak_rss(metrics: dict) -> float | None:
    """The largest peak resident memory of the run's processes (GB)."""
    peaks = [metrics.get("peak_rss_gb"), (metrics.get("run_clock") or {}).get("peak_rss_gb_earlier_processes")]
    return max((p for p in peaks if p is not None), default=None)


def utility_cell(utility: dict, key: str) -> str:
    """"-" for an image run without that accuracy, nothing for a run of the other kind."""
    if key not in utility:
        return ""
    return "-" if utility[key] is None else number(utility[key])


def budget_cell(row: dict) -> str:
    if not math.isinf(row["budget"]):
        return f"{row['budget']:g}"
    if row.get("claimed") is not None:  # e.g. method=pategan_2018_code: the epsilon its code claims, not a bound
        return f"none (the code claims {row['claimed']:g}; no guarantee)"
    return "none (privacy off)" if row["control"] else "none (not private)"


def markdown_table(rows: list[dict]) -> str:
    bounds = sorted({bound for row in rows for bound in row["spent"]})
    keys = {key for row in rows for key in row["utility"]}
    utilities = [key for key in ACCURACIES if key in keys] + sorted(keys - set(ACCURACIES))
    head = ["method", "data", "budget eps", "guarantee", *(ACCURACIES.get(key, key) for key in utilities), "IS", "FID",
            *(f"eps ({b})" for b in bounds), "steps",
            "wall time (s)", "peak RSS (GB)", "machine", "command", "run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in sorted(rows, key=lambda r: (r["data"], r["method"], r["budget"])):
        cells = [row["method"], row["data"], budget_cell(row), row["guarantee"]["label"],
                 *(utility_cell(row["utility"], key) for key in utilities), number(row["IS"], 3), number(row["FID"]),
                 *(number(row["spent"].get(b), 5) for b in bounds), str(row["steps"] or ""),
                 row["wall_time"], number(row["peak_rss_gb"], 3), row["machine"] or "",
                 f"`{row['command']}`" if row["command"] else "", f"`{row['path']}`"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- report -->", "<!-- /report -->"
COMPARISON = "comparison.yaml"  # in the results folder: which run stands for each cell of the comparison table
CARDS = "cards.yaml"  # beside it: the method cards of RESULTS.md (cli/cards.py)
TABLES = "tables.yaml"  # beside it: the tabular cells of RESULTS.md (cli/cards.py tables_table)
GOALS = "goals.yaml"  # beside it: the image cells against their goals (cli/cards.py goals_table)
RUNS = "RUNS.md"  # beside RESULTS.md: the page of the full run table, where there is one
REFERENCE_EVAL = "eval_reference.json"  # in a run folder: its generator under the G-PATE authors' evaluation
PTG_EVAL = "eval_ptg.json"  # in a run folder: evaluate.py eval=ptg of its samples (PATE-TripleGAN's evaluation)
# the settings of eval=ptg that make its number PATE-TripleGAN's protocol (conf/eval/ptg.yaml)
PTG_SETTINGS = ("n_samples", "max_epochs", "val_fraction", "patience", "repeats", "cnn", "optimizer", "lr", "batch_size",
                "selection")
COMPARISON_BEGIN, COMPARISON_END = "<!-- comparison -->", "<!-- /comparison -->"


def write_block(path: Path, table: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the generated block of a markdown file (between `begin` and `end` lines) with `table`."""
    text = path.read_text()
    if begin not in text or end not in text:
        raise ValueError(f"{path}: no generated block; put a line {begin} and a line {end} where the table goes")
    head, rest = text.split(begin, 1)
    path.write_text(f"{head}{begin}\n{table}{end}{rest.split(end, 1)[1]}")


def percent(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def comparison_runs(spec_path: Path) -> set[Path]:
    """The run folders the comparison spec names for its cells."""
    spec = OmegaConf.to_container(OmegaConf.load(spec_path))
    return {(spec_path.parent / cell["run"]).resolve() for method in spec["methods"]
            for cell in (method.get("cells") or {}).values()}


def cell_guarantee(row: dict, column_epsilon: float, private_cell: bool, where: str) -> str:
    """What a comparison cell adds to its numbers, from its run's privacy.json: nothing for a DP run at the column's
    budget; the DP bound for a data-dependent one; "no DP guarantee" for a run without one. ValueError for a run
    that cannot stand in its column: a noise-free control, or a private run of another budget."""
    kind = row["guarantee"]["kind"]
    if row["control"] or kind == "unknown" or (kind != "none" and row["budget"] != column_epsilon):
        raise ValueError(f"{where} is {row['guarantee']['label']} at budget {row['budget']:g}: not a cell of the "
                         f"eps = {column_epsilon:g} column")
    if kind == "data-dependent":
        return f" (data-dependent eps; DP eps {row['guarantee']['dp']:.3g})"
    if kind == "none" and private_cell:
        return " (no DP guarantee)"
    return ""


def authors_eval(run: Path | None) -> str:
    """A comparison cell's number from the G-PATE authors' evaluation (`python -m dpgen.reference_eval`: the best
    real-test epoch of 600, <run>/eval_reference.json; ">= x (epochs 1-n of 600)" where it stopped early), or "not
    run"; ValueError for a file of a shortened one."""
    path = None if run is None else run / REFERENCE_EVAL
    if path is None or not path.is_file():
        return "not run"
    result = json.loads(path.read_text())
    settings = result.get("settings") or {}
    config = OmegaConf.load(CONF_DIR / "eval" / "reference.yaml")
    authors = {key: config.callbacks.downstream[key] for key in ("n_samples", "max_epochs", "batch_size", "cnn")}
    authors["lr"] = config.reference_lr.get(result.get("data"))
    if any(settings.get(key) != value for key, value in authors.items()):
        raise ValueError(f"{path}: not the authors' evaluation ({authors}): {settings}")
    number = percent(result["downstream"]["max_test_accuracy"])
    stopped = result.get("stopped_early")  # `--patience`: the best of the epochs run, a lower bound of the number
    return f">= {number} (epochs 1-{stopped['epochs_run']} of {stopped['of']})" if stopped else number


def ptg_eval(run: Path | None) -> str:
    """A comparison cell's number from PATE-TripleGAN's evaluation (`evaluate.py eval=ptg out=<run>/eval_ptg.json`:
    the mean last-epoch accuracy of five trainings), or "not run"; ValueError for a file of other settings."""
    path = None if run is None else run / PTG_EVAL
    if path is None or not path.is_file():
        return "not run"
    result = json.loads(path.read_text())["downstream"]
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        config = compose("evaluate", overrides=["eval=ptg", "synthetic=unused"]).eval.callbacks.downstream
    expected = {key: config[key] for key in PTG_SETTINGS}
    if {key: (result.get("settings") or {}).get(key) for key in PTG_SETTINGS} != expected:
        raise ValueError(f"{path}: not PATE-TripleGAN's evaluation ({expected}): {result.get('settings')}")
    return percent(result["accuracy"])


def comparison_table(spec_path: Path) -> str:
    """The papers' table shape: one row per method, one column per (data, epsilon) of `spec_path`'s `columns`;
    each cell the accuracies of the kept run its `cells` entry names (`run`, a folder beside `spec_path`; beside it
    `experiment`, the conf/experiment file that reruns it), epoch chosen on the synthetic hold-out / the private
    validation split / the real test set, then what the paper reports
    (`paper`; a method whose numbers come from another paper than the one most rows cite names it in `paper_name`)
    and, beside a number of the G-PATE paper, the run's under that paper's own evaluation (authors_eval), beside
    one of a paper whose `paper_eval` is ptg, the run's under PATE-TripleGAN's evaluation (ptg_eval).
    A run the spec names must exist; a cell it leaves out reads "not run", or its `notes` entry (why no run stands
    there, e.g. what the planner says the budget buys)."""
    spec = OmegaConf.to_container(OmegaConf.load(spec_path))
    columns = [(data, eps) for data, budgets in spec["columns"].items() for eps in budgets]
    head = ["method", *(f"{data}, eps = {eps:g}" for data, eps in columns)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(columns)]
    for method in spec["methods"]:
        cells, paper, notes = (method.get(part) or {} for part in ("cells", "paper", "notes"))
        paper_name = method.get("paper_name", "paper")
        out = []
        for data, eps in columns:
            key = f"{data}_{eps:g}"
            run_name = cells.get(key, cells.get(data, {})).get("run")  # a non-private method: one run per dataset
            reported = paper.get(key, paper.get(data))
            if run_name is None:
                cell = notes.get(key, notes.get(data, "not run"))
            else:
                run = spec_path.parent / run_name
                if not (run / "metrics.json").is_file():
                    raise FileNotFoundError(f"{spec_path}: {run_name} (cell {method['name']}, {key}) is no kept run")
                row = load_run(run)
                u = row["utility"]
                cell = (f"[{percent(u.get('synthetic'))} / {percent(u.get('private_val'))} / "
                        f"{percent(u.get('test'))}]({spec_path.parent.name}/{run_name})"  # from the folder above
                        + cell_guarantee(row, eps, key in cells, f"{spec_path}: {run_name} (cell {method['name']}, {key})"))
            if reported is not None and paper_name == "paper":  # the G-PATE paper's: scored by its authors' evaluation
                cell += f" (authors' eval {authors_eval(spec_path.parent / run_name if run_name else None)}, "
                cell += f"paper {100 * reported:.2f})"
            elif reported is not None and method.get("paper_eval") == "ptg":  # scored by that paper's evaluation
                cell += f" (PTG's eval {ptg_eval(spec_path.parent / run_name if run_name else None)}, "
                cell += f"{paper_name} {100 * reported:.2f})"
            elif reported is not None:
                cell += f" ({paper_name} {100 * reported:.2f})"
            out.append(cell)
        lines.append(f"| {method['name']} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


def plot_utility(rows: list[dict], path: Path, accuracy: str = "synthetic") -> None:
    """`accuracy`: which image accuracy (a key of ACCURACIES) is drawn; tables alone: the mean AUROC."""
    metric = accuracy if any(accuracy in r["utility"] for r in rows) else "auroc"
    drawn = [r for r in rows if r["utility"].get(metric) is not None and not r["control"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    groups = sorted({(r["data"], r["method"]) for r in drawn})
    for data, method in groups:
        points = sorted((r["budget"], r["utility"][metric]) for r in drawn if (r["data"], r["method"]) == (data, method))
        private = [(eps, value) for eps, value in points if not math.isinf(eps)]
        if private:
            ax.plot(*zip(*private), marker="o", label=f"{method} ({data})")
        for eps, value in points:
            if math.isinf(eps):
                ax.axhline(value, linestyle="--", color="grey", label=f"{method} ({data}, not private)")
    ax.set_xscale("log")  # budgets from 0.1 to noise-free controls at 1e4: a linear axis hides the small ones
    ax.set_xlabel("privacy budget epsilon (log scale)")
    ax.set_ylabel(ACCURACIES.get(metric, metric))
    ax.set_title(f"{ACCURACIES.get(metric, metric)} of synthetic data vs epsilon", fontsize="medium")
    if groups:
        ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the lines
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_authors_eval(spec_path: Path, path: Path) -> bool:
    """The G-PATE authors' evaluation of each comparison cell that holds one with its epochs' history (as
    reference_eval writes it): real-test accuracy per epoch, the best epoch marked, the G-PATE paper's number as a
    dashed line of the same colour. False (nothing written) when no cell has one."""
    spec = OmegaConf.to_container(OmegaConf.load(spec_path))
    curves = []
    for method in spec["methods"]:
        if method.get("paper_name", "paper") != "paper":  # numbers of another paper: scored by its evaluation
            continue
        for key, cell in (method.get("cells") or {}).items():
            evaluated = spec_path.parent / cell["run"] / REFERENCE_EVAL
            result = json.loads(evaluated.read_text()) if evaluated.is_file() else {}
            history = result.get("downstream", {}).get("history")
            if history:
                data, _, eps = key.rpartition("_")
                label = f"{method['name']}, {data}, eps {eps}" if data in spec["columns"] else f"{method['name']}, {key}"
                curves.append((label, history, (method.get("paper") or {}).get(key), "stopped_early" in result))
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(9, 4))
    for label, history, reported, stopped in curves:
        epochs = [record["epoch"] for record in history]
        tested = [100 * record["test_accuracy"] for record in history]
        best = tested.index(max(tested))
        # stopped early (--patience): the best so far, a lower bound of the 600-epoch number
        best_text = (f">= {tested[best]:.1f} (epoch {epochs[best]}; stopped at {epochs[-1]})" if stopped
                     else f"{tested[best]:.1f} (epoch {epochs[best]})")
        line, = ax.plot(epochs, tested, label=f"{label}: best {best_text}")
        ax.plot([epochs[best]], [tested[best]], marker="o", color=line.get_color())
        if reported is not None:
            ax.axhline(100 * reported, linestyle="--", color=line.get_color(), label=f"{label}: paper {100 * reported:.2f}")
    ax.set_xlabel("epoch of the authors' classifier (SGD, 100,000 samples)")
    ax.set_ylabel("real-test accuracy (%)")
    ax.set_title("G-PATE authors' evaluation: the best real-test epoch is the number", fontsize="medium", loc="left")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_samples(rows: list[dict], path: Path) -> bool:
    """One panel per run with a final sample grid; False (nothing written) when no run has one."""
    rows = [r for r in rows if r["grid"].exists()]
    if not rows:
        return False
    cols = min(4, len(rows))
    fig, axes = plt.subplots(math.ceil(len(rows) / cols), cols, figsize=(3 * cols, 3.3 * math.ceil(len(rows) / cols)),
                             squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, row in zip(axes.flat, rows):
        ax.imshow(plt.imread(row["grid"]), cmap="gray")
        budget = "not private" if math.isinf(row["budget"]) else f"eps {row['budget']:g}"
        ax.set_title(f"{row['method']}, {row['data']}, {budget}", fontsize="small")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    # a 256-colour palette: the same picture (grey grids, black titles) in less than half the bytes of RGBA
    Image.open(buffer).convert("RGB").quantize(256).save(path, optimize=True)
    return True


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m dpgen.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="multirun folders or run folders")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the first path)")
    parser.add_argument("--accuracy", choices=list(ACCURACIES), default="synthetic",
                        help="which image accuracy the utility-vs-epsilon plot draws (default: synthetic)")
    parser.add_argument("--keep", nargs=2, type=Path, metavar=("RUN", "DEST"),
                        help="store the small files of run folder RUN in DEST, e.g. docs/results/<name>")
    args = parser.parse_args(argv)
    if args.keep:
        dest = keep(*args.keep)
        console.print(f"{args.keep[0]} -> {dest}")
        return dest
    if not args.paths:
        parser.error("give run or multirun folders, or --keep RUN DEST")
    runs = find_runs(args.paths)
    if not runs:
        raise FileNotFoundError(f"no finished runs (metrics.json + .hydra/config.yaml) below {args.paths}")
    rows = [load_run(run) for run in runs]
    found = len(rows)
    out = args.out or args.paths[0]
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows)
    if (out / "RESULTS.md").exists():
        runs_page = out / RUNS if (out / RUNS).exists() else out / "RESULTS.md"  # the full run list's page
        write_block(runs_page, table)
        written = sorted({"RESULTS.md", runs_page.name})
        spec = next((path / COMPARISON for path in args.paths if (path / COMPARISON).is_file()), None)
        if spec is not None:
            write_block(out / "RESULTS.md", comparison_table(spec), COMPARISON_BEGIN, COMPARISON_END)
            if (spec.parent / CARDS).is_file():
                from dpgen.cli.cards import (CARDS_BEGIN, CARDS_END, GOALS_BEGIN, GOALS_END, TABLES_BEGIN, TABLES_END,
                                             WHICH_BEGIN, WHICH_END, cards, goals_table, tables_table, which_method)
                write_block(out / "RESULTS.md", cards(spec.parent / CARDS, spec), CARDS_BEGIN, CARDS_END)
                if (spec.parent / TABLES).is_file():
                    write_block(out / "RESULTS.md", tables_table(spec.parent / TABLES), TABLES_BEGIN, TABLES_END)
                if (spec.parent / GOALS).is_file():
                    write_block(out / "RESULTS.md", goals_table(spec.parent / GOALS), GOALS_BEGIN, GOALS_END)
                readme = out.parent / "README.md"  # its "which method" table, where it has one
                if readme.is_file() and WHICH_BEGIN in readme.read_text():
                    write_block(readme, which_method(spec), WHICH_BEGIN, WHICH_END)
                    written.append(str(readme))
            if plot_authors_eval(spec, out / "authors_eval.png"):
                written.append("authors_eval.png")
            cells = comparison_runs(spec)  # the plots draw the comparison's cells: one line per method and data
            rows = [row for row in rows if Path(row["path"]).resolve() in cells]
    else:
        (out / "report.md").write_text(f"# Runs compared ({len(rows)})\n\n" + table)
        written = ["report.md"]
    plot_utility(rows, out / "utility_vs_epsilon.png", args.accuracy)
    written += ["utility_vs_epsilon.png"] + (["samples.png"] if plot_samples(rows, out / "samples.png") else [])
    console.print(f"{found} runs -> {out}: {', '.join(written)}" + ("" if len(rows) == found else
                                                                     f" (the plots: the {len(rows)} cells' runs)"))
    return out


def cli() -> None:
    """Entry point: a missing folder or a RESULTS.md without its block is one error line and exit status 2."""
    try:
        main()
    except (FileNotFoundError, ValueError) as err:
        fail(str(err))
