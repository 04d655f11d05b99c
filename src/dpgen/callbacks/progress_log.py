"""ProgressLog: a plain-text progress line in the run's log (train.log), for runs without a terminal
(nohup, batch jobs) where the progress bar is not seen."""

from __future__ import annotations

import logging
import time

import lightning.pytorch as pl

from dpgen.memory import peak_rss_gb, rss_gb

log = logging.getLogger(__name__)


class ProgressLog(pl.Callback):
    """Every `every_seconds` of training (and at the end) logs the step, the seconds per step since the
    last line, the scalars the module logged (losses, epsilon) and the resident memory now and at its peak."""

    def __init__(self, every_seconds: float = 60.0):
        if every_seconds < 0:
            raise ValueError(f"every_seconds must be >= 0, got {every_seconds}")
        self.every_seconds = float(every_seconds)
        self._last_time = self._last_step = None

    def line(self, trainer) -> str:
        now, step = time.monotonic(), trainer.global_step
        # no pace when no step ran since the last line (the end line right after one, a resumed finished run)
        parts = [f"{(now - self._last_time) / (step - self._last_step):.3g} s/step"] if step > self._last_step else []
        self._last_time, self._last_step = now, step
        parts += [f"{k}={float(v):.4g}" for k, v in sorted(trainer.callback_metrics.items())
                  if v.numel() == 1]  # Lightning keeps logged values as tensors
        rss = rss_gb()
        parts += ([f"rss={rss:.2f}GB"] if rss is not None else []) + [f"peak_rss={peak_rss_gb():.2f}GB"]
        return f"step {step}: " + " ".join(parts)

    def on_train_start(self, trainer, pl_module):
        self._last_time, self._last_step = time.monotonic(), trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if time.monotonic() - self._last_time >= self.every_seconds and trainer.is_global_zero:
            log.info(self.line(trainer))

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            log.info("training ended, " + self.line(trainer))
