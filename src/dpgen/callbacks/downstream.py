"""`DownstreamUtility`: train-on-synthetic / test-on-real utility every N steps and at the end of training.

The evaluation itself lives in `dpgen.evaluation.downstream`; `EvaluationCallback` (shared with
`ImageQuality`) only decides when to run, samples the generator and logs the scalars.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import torch

from dpgen.callbacks.release import AtTrainEnd
from dpgen.evaluation.downstream import SELECTIONS, image_accuracy, tabular_evaluation, tabular_scores
from dpgen.files import append_json_line, atomic_write_text
from dpgen.privacy.selection import MECHANISM, charge, report_noisy_max, selection_report

log = logging.getLogger(__name__)


def flatten(results: dict, prefix: str) -> dict[str, float]:
    """{"a": {"b": 1.0}, "c": 2} -> {"<prefix>/a/b": 1.0, "<prefix>/c": 2.0}; non-numbers are dropped."""
    out = {}
    for key, value in results.items():
        name = f"{prefix}/{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


class EvaluationCallback(AtTrainEnd):
    """Base of the evaluation callbacks: a subclass defines `evaluate(trainer, pl_module) -> dict`.

    Runs `evaluate` when `trainer.global_step` enters a new multiple of
    `every_n_steps` (0: never during training) and at the end of training (`at_end`; `AtTrainEnd`: also for a run
    resumed from the checkpoint of its last step, cut off during its evaluation).

    The last results are kept in `self.results` (with the step) and their numbers are sent to
    every logger as `<name>/<key>` (and, to a logger with tables such as W&B's, as one table `<name>/table`).
    Sampling runs under a forked, seeded RNG so evaluations neither change the training trajectory nor differ
    between runs.
    """

    name = "eval"

    def __init__(self, every_n_steps: int = 0, n_samples: int = 10000, at_end: bool = True, seed: int = 0):
        self.every_n_steps, self.n_samples, self.at_end, self.seed = every_n_steps, n_samples, at_end, seed
        self.results: dict = {}
        self._last_period = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.every_n_steps <= 0:
            return
        period = trainer.global_step // self.every_n_steps
        if period > self._last_period:
            self._last_period = period
            self.run(trainer, pl_module)

    def train_ended(self, trainer, pl_module):
        if self.at_end:
            self.run(trainer, pl_module)

    def run(self, trainer, pl_module) -> dict:
        if not trainer.is_global_zero:
            return self.results
        step = pl_module.released_step(trainer.global_step)
        log.info("%s: evaluating the generator of step %d", self.name, step)
        start = time.perf_counter()
        results = self.evaluate(trainer, pl_module)
        log.info("%s: done in %.0f s: %s", self.name, time.perf_counter() - start, flatten(results, self.name))
        if results:
            self.results = {**results, "step": step}
            metrics = flatten(results, self.name)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
                if hasattr(logger, "log_table"):  # W&B: the same numbers as one table per evaluation
                    logger.log_table(key=f"{self.name}/table", columns=["metric", "value"],
                                     data=[[name, value] for name, value in metrics.items()], step=trainer.global_step)
        return self.results

    def synthetic(self, pl_module, labels: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """`pl_module.sample(n_samples, labels)` on the CPU under a forked RNG seeded with `seed`."""
        devices = [pl_module.device] if pl_module.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(self.seed)
            x, y = pl_module.sample(self.n_samples, labels)
        return x.detach().cpu().float(), y.detach().cpu().long()


class DownstreamUtility(EvaluationCallback):
    """Images: accuracy on the real test set of the appendix E CNN trained on `n_samples` synthetic
    images with uniform labels. Tables: AUROC / AUPRC of `tabular_models` ("gpate" or "pategan")
    trained on synthetic records (labels chosen by the method) and tested on the real test set;
    with `ranking=True` also PATE-GAN settings A and C, SRA and feature ranking agreement. `cnn`, `optimizer`,
    `lr` and `batch_size` choose the CNN and how it trains (`eval=reference`: the reference code's evaluation
    script). `state_file`: the CNN's training is saved there after every epoch and continues from it when the
    same evaluation is run again (evaluate.py keeps it beside its output).

    `selection` names the protocol whose epoch gives `accuracy` (images; all three are reported, each with its
    epoch): "synthetic", "private_val" (the datamodule's `private_val_data`, by Report Noisy Max with
    `private_val_epsilon` per evaluation; the selections' line is added to the run's privacy.json when training
    ends) or "test" (not DP). Each selection is charged before it is made (`charges`, after the `earlier` ones
    made on the same release; also appended to the JSON-lines file `charge_log` when one is given), and refused
    when it would take them past `private_val_budget` (None: no stated budget). `sample_batch_norm` b: the
    generator's samples are drawn with BatchNorm on batches of b (eval=reference for G-PATE, as its authors drew
    them); None: as the method releases them. `repeats` r > 1 (images): the classifier is trained r times on the
    same samples, from seeds `seed`, `seed + 1`, ...; `accuracy` (and each choice's, `synthetic` and `test`) is the
    mean of their accuracies (each in `repeat_accuracies`, their spread `repeat_std`); the epochs and the history
    are the first training's."""

    name = "downstream"

    def __init__(
        self,
        every_n_steps: int = 0,
        n_samples: int = 60000,
        at_end: bool = True,
        seed: int = 0,
        val_fraction: float = 0.1,
        max_epochs: int = 10,
        patience: int = 3,
        tabular_models: str = "gpate",
        ranking: bool = False,
        optimizer: str = "adam",
        lr: float | None = 1e-3,
        batch_size: int = 128,
        cnn: str = "appendix_e",
        state_file: str | None = None,
        selection: str = "synthetic",
        private_val_epsilon: float | None = None,
        private_val_budget: float | None = None,
        charge_log: str | None = None,
        sample_batch_norm: int | None = None,
        repeats: int = 1,
    ):
        super().__init__(every_n_steps, n_samples, at_end, seed)
        if repeats < 1 or (repeats > 1 and selection == "private_val"):
            raise ValueError(f"repeats must be >= 1, and 1 with selection=private_val (one charged selection an "
                             f"evaluation), got {repeats}")
        self.repeats = repeats
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
        if private_val_epsilon is not None and not private_val_epsilon > 0:
            raise ValueError(f"the private validation selection's epsilon must be > 0, got {private_val_epsilon}")
        if lr is None:
            raise ValueError("the downstream classifier's learning rate is null: eval=reference has the G-PATE authors' "
                             "settings for mnist and fashion_mnist only (conf/eval/reference.yaml)")
        if private_val_budget is not None and not private_val_budget > 0:
            raise ValueError(f"the private validation selections' budget must be > 0, got {private_val_budget}")
        self.selection, self.private_val_epsilon = selection, private_val_epsilon
        self.private_val_budget, self.charge_log = private_val_budget, charge_log
        self.sample_batch_norm = sample_batch_norm
        self.earlier: list[dict] = []  # charges made on this release before (evaluate.py: its privacy.json, log)
        self.charges: list[dict] = []  # this callback's charges (this run's, resumed ones included)
        # In training the datamodule holds the split out before anything else reads the training data: the
        # selections read records disjoint from the generator's. evaluate.py sets both from what it evaluates.
        self.disjoint_from_generator, self.charged_by = True, "train.py"
        self.val_fraction, self.max_epochs, self.patience = val_fraction, max_epochs, patience
        self.state_file = state_file
        self.optimizer, self.lr, self.batch_size, self.cnn = optimizer, lr, batch_size, cnn
        self.tabular_models, self.ranking = tabular_models, ranking

    def settings(self) -> dict:
        """How the image classifier is trained and chosen: what makes a number one protocol's (evaluate.py writes
        it beside the results)."""
        keys = ("n_samples", "max_epochs", "val_fraction", "patience", "repeats", "cnn", "optimizer", "lr",
                "batch_size", "selection", "sample_batch_norm", "seed")
        return {key: getattr(self, key) for key in keys}

    def check_data(self, dm) -> None:
        """ValueError unless the data fit `selection`: tables have no epochs to choose; private_val needs the
        datamodule's split (eval.selection=private_val makes train.py and evaluate.py hold it out)."""
        if self.selection == "synthetic":
            return
        if dm.test_data.x.dim() != 4:
            raise ValueError(f"eval.selection={self.selection} chooses the image classifier's epoch; tables "
                             "have no epochs (use eval.selection=synthetic)")
        if self.selection == "private_val" and dm.private_val_data is None:
            raise ValueError("eval.selection=private_val needs the datamodule's private validation split "
                             "(its private_val share)")
        if self.selection == "private_val" and self.private_val_epsilon is None:
            raise ValueError("eval.private_val.epsilon must be given: the selection's privacy budget")

    def setup(self, trainer, pl_module, stage):
        self.check_data(trainer.datamodule)  # before training, not after it

    def train_ended(self, trainer, pl_module):
        super().train_ended(trainer, pl_module)
        privacy = Path(trainer.default_root_dir) / "privacy.json"  # PrivacyBudget's, written when training ended
        if self.charges and trainer.is_global_zero and privacy.is_file():
            report = json.loads(privacy.read_text())
            report["downstream_selection"] = self.selection_privacy(report)
            atomic_write_text(privacy, json.dumps(report, indent=2) + "\n")

    def selection_privacy(self, generator: dict | None) -> dict:
        """The privacy.json line of every private validation selection made on this release (privacy.selection)."""
        return selection_report([*self.earlier, *self.charges], generator)

    def charge_selection(self, dm) -> None:
        """Charge one selection on `dm`'s split before it is made (privacy.selection.charge)."""
        made = charge(self.private_val_epsilon, self.disjoint_from_generator, dm.private_val_split_descriptor,
                      self.charged_by, [*self.earlier, *self.charges], self.private_val_budget)
        if self.charge_log is not None:
            append_json_line(self.charge_log, made)
        self.charges.append(made)

    def state_dict(self):
        return {"charges": self.charges}

    def load_state_dict(self, state_dict):
        if "charges" in state_dict:
            self.charges = list(state_dict["charges"])
        else:  # a checkpoint of an older dpgen: a count of selections at this callback's epsilon
            self.charges = [charge(self.private_val_epsilon, True, None, self.charged_by, [], None)
                            for _ in range(int(state_dict["selections"]))]

    def evaluate(self, trainer, pl_module) -> dict:
        test = trainer.datamodule.test_data
        if test.x.dim() == 4:
            labels = torch.arange(self.n_samples) % trainer.datamodule.num_classes
        else:
            labels = None  # tables: the method's own class ratio
        if self.sample_batch_norm is None:
            x, y = self.synthetic(pl_module, labels)
        else:  # BatchNorm on batches of this many samples while sampling, then the method's own way again
            released, pl_module.sample_batch_norm = pl_module.sample_batch_norm, int(self.sample_batch_norm)
            try:
                x, y = self.synthetic(pl_module, labels)
            finally:
                pl_module.sample_batch_norm = released
        return self.evaluate_synthetic(x, y, trainer.datamodule, pl_module.device)

    def evaluate_synthetic(self, x: torch.Tensor, y: torch.Tensor, dm, device=None) -> dict:
        """The evaluation of a given synthetic set against the datamodule's real data (also evaluate.py's)."""
        self.check_data(dm)
        test = dm.test_data
        if test.x.dim() == 4:
            private, choose = None, None
            if self.selection == "private_val":
                self.charge_selection(dm)  # before any private record is read
                private = (dm.private_val_data.x, dm.private_val_data.y)
                rng = np.random.default_rng()  # the noise's source: fresh operating-system entropy, not the seed

                def choose(counts: list[int]) -> int:
                    return report_noisy_max(counts, self.private_val_epsilon, rng)

            runs = [image_accuracy(
                x, y, test.x, test.y, num_classes=dm.num_classes, val_fraction=self.val_fraction,
                max_epochs=self.max_epochs, patience=self.patience, batch_size=self.batch_size, optimizer=self.optimizer,
                lr=self.lr, cnn=self.cnn, seed=self.seed + i, device=device, progress=True,
                state_file=self.state_file if self.state_file is None or self.repeats == 1 else f"{self.state_file}.{i}",
                selection=self.selection, private_val=private, choose=choose,
            ) for i in range(self.repeats)]
            results = runs[0]
            if self.repeats > 1:  # the same samples, a classifier trained anew from each seed: mean accuracies
                accuracies = [run["accuracy"] for run in runs]
                results = {**results, "accuracy": float(np.mean(accuracies)), "repeat_accuracies": accuracies,
                           "repeat_std": float(np.std(accuracies))}
                for chosen in ("synthetic", "test"):
                    results[chosen] = {**results[chosen],
                                       "accuracy": float(np.mean([run[chosen]["accuracy"] for run in runs]))}
                results["max_test_accuracy"] = results["test"]["accuracy"]
            if private is not None:
                results["private_val"].update(mechanism=MECHANISM, epsilon=self.private_val_epsilon)
            return results
        if self.ranking:
            train = dm.train_data
            return tabular_evaluation(train.x, train.y, test.x, test.y, x, y, models=self.tabular_models, seed=self.seed)
        return tabular_scores(x, y, test.x, test.y, models=self.tabular_models, seed=self.seed)
