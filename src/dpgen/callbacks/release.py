"""What a run releases (privacy.json, the final sample grid, generator.pt) is written the moment training ends,
before the evaluation callbacks run (they can take longer than a short run's training): a crash or a kill during
evaluation leaves the run's released files behind."""
from __future__ import annotations

import gc
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable

import lightning.pytorch as pl


class AtTrainEnd(pl.Callback, ABC):
    """Calls `train_ended` once when training ends; at fit end instead when training never ran (a resumed run that
    had already finished, or was cut off after its last step: Lightning then skips the training hooks)."""

    _ended = False

    @abstractmethod
    def train_ended(self, trainer, pl_module) -> None:
        """What this callback does when training ends (every process)."""

    def on_fit_start(self, trainer, pl_module):
        self._ended = False

    def on_train_end(self, trainer, pl_module):
        self._ended = True
        self.train_ended(trainer, pl_module)

    def on_fit_end(self, trainer, pl_module):
        if not self._ended:
            self.on_train_end(trainer, pl_module)


class WritesAtTrainEnd(AtTrainEnd):
    """Calls `write_final` on process 0 when training ends (`AtTrainEnd`)."""

    @abstractmethod
    def write_final(self, trainer, pl_module) -> None:
        """Writes this callback's part of the released run (process 0 only)."""

    def check_final(self, trainer, pl_module) -> None:
        """Runs on every process before `write_final`: raises when the run must release nothing (PrivacyBudget)."""

    def train_ended(self, trainer, pl_module) -> None:
        self.check_final(trainer, pl_module)
        if trainer.is_global_zero:
            self.write_final(trainer, pl_module)


class Release(WritesAtTrainEnd):
    """Calls `save(pl_module)`: placed after PrivacyBudget (whose rollback of an over-budget step has happened by
    then) and before every evaluation callback."""

    def __init__(self, save: Callable[[pl.LightningModule], None]):
        self.save = save

    def write_final(self, trainer, pl_module) -> None:
        self.save(pl_module)


class FreePrivateModules(pl.Callback):
    """When training ends, after `Release` and before the evaluation callbacks: writes the final checkpoint
    (`last.ckpt` of each ModelCheckpoint with `save_last`) unless the last one written holds the final step,
    then drops the method's `private_modules` (G-PATE's and PATE-GAN's teacher ensembles, GS-WGAN's critics).
    The final checkpoint holds the ledger of everything the run released (generator.pt, the final grid): a run
    resumed from an earlier one would redo released steps without counting them. Evaluation samples the
    generator only, and a 4000-teacher G-PATE ensemble (17.8 GB) would otherwise stay in memory through it.
    After this hook those attributes are None; the checkpoints hold them."""

    _saved_step: int | None = None

    def on_fit_start(self, trainer, pl_module):
        self._saved_step = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self._saved_step = trainer.global_step

    def on_train_end(self, trainer, pl_module):
        for cb in trainer.checkpoint_callbacks:
            cb.on_train_end(trainer, pl_module)  # ModelCheckpoint's save-last when none was written, brought ahead
        if self._saved_step != trainer.global_step:  # the last one written holds an earlier step
            for cb in trainer.checkpoint_callbacks:
                if getattr(cb, "save_last", False) and cb.dirpath:
                    last = Path(cb.dirpath) / f"{cb.CHECKPOINT_NAME_LAST}{cb.FILE_EXTENSION}"
                    trainer.save_checkpoint(last, weights_only=False)  # the whole state, for resume=
        for name in getattr(pl_module, "private_modules", ()):
            setattr(pl_module, name, None)
        gc.collect()
