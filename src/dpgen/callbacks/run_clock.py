"""`RunClock`: training time and peak memory of a run, summed over the processes of a resumed run."""
from __future__ import annotations

import time

import lightning.pytorch as pl

from dpgen.memory import peak_rss_gb

KEY = "run_clock"


class RunClock(pl.Callback):
    """Training seconds of this process and of the earlier processes of the same run (up to their last
    checkpoint: work after it was lost and is redone, so it is not counted), and their peak resident memory.
    `results` goes into metrics.json as "run_clock"."""

    name = "run_clock"

    def __init__(self):
        self.start, self.before_s, self.before_peak_gb, self.processes = None, 0.0, 0.0, 1
        self.results = None

    def on_train_start(self, trainer, pl_module):
        self.start = time.time()

    def elapsed(self) -> float:
        return 0.0 if self.start is None else time.time() - self.start

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint[KEY] = {"train_s": self.before_s + self.elapsed(), "processes": self.processes,
                           "peak_rss_gb": max(self.before_peak_gb, peak_rss_gb())}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        state = checkpoint.get(KEY)
        if state is not None:
            self.before_s, self.before_peak_gb = state["train_s"], state["peak_rss_gb"]
            self.processes = state["processes"] + 1

    def on_train_end(self, trainer, pl_module):
        self.results = {"train_s_this_process": round(self.elapsed(), 1),
                        "train_s_total": round(self.before_s + self.elapsed(), 1), "processes": self.processes,
                        "peak_rss_gb_this_process": round(peak_rss_gb(), 2),
                        "peak_rss_gb_earlier_processes": round(self.before_peak_gb, 2)}
