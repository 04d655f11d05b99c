"""`FreeHeap`: the memory a training step freed goes back to the system between steps."""
from __future__ import annotations

import time

import lightning.pytorch as pl

from dpgen.memory import give_back_free_heap


class FreeHeap(pl.Callback):
    """After a training step, at most once every `every_seconds`, returns the C heap's free pages to the system
    (`memory.give_back_free_heap`). The allocator keeps freed blocks for reuse (`memory.reuse_freed_memory`):
    within a step that saves page faults, but what one step, a checkpoint or a sample grid freed would stay
    resident for the rest of the run, and on a machine filled by a 4000-teacher ensemble those pages are the
    difference between fitting and not. The next step faults its working memory in again (a fraction of a
    second against a 30 s step); fast runs are throttled by `every_seconds`. Also once when training starts,
    after a resumed run's checkpoint has been restored and released: what the restore freed is not held
    through the first step."""

    def __init__(self, every_seconds: float = 10.0):
        if every_seconds < 0:
            raise ValueError(f"every_seconds must be >= 0, got {every_seconds}")
        self.every_seconds = float(every_seconds)
        self._last = time.monotonic()

    def on_train_start(self, trainer, pl_module):
        give_back_free_heap()
        self._last = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if time.monotonic() - self._last >= self.every_seconds:
            give_back_free_heap()
            self._last = time.monotonic()
