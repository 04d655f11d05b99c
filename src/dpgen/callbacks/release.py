"""What a run releases (privacy.json, the final sample grid, generator.pt) is written the moment training ends,
before the evaluation callbacks run (they can take longer than a short run's training): a crash or a kill during
evaluation leaves the run's released files behind."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import lightning.pytorch as pl


class WritesAtTrainEnd(pl.Callback, ABC):
    """Calls `write_final` on process 0 when training ends; at fit end instead when training never ran (a resumed
    run that had already finished: Lightning then skips the training hooks)."""

    _written = False

    @abstractmethod
    def write_final(self, trainer, pl_module) -> None:
        """Writes this callback's part of the released run (process 0 only)."""

    def on_fit_start(self, trainer, pl_module):
        self._written = False

    def on_train_end(self, trainer, pl_module):
        self._write(trainer, pl_module)

    def on_fit_end(self, trainer, pl_module):
        if not self._written:
            self._write(trainer, pl_module)

    def _write(self, trainer, pl_module) -> None:
        self._written = True
        if trainer.is_global_zero:
            self.write_final(trainer, pl_module)


class Release(WritesAtTrainEnd):
    """Calls `save(pl_module)`: placed after PrivacyBudget (whose rollback of an over-budget step has happened by
    then) and before every evaluation callback."""

    def __init__(self, save: Callable[[pl.LightningModule], None]):
        self.save = save

    def write_final(self, trainer, pl_module) -> None:
        self.save(pl_module)
