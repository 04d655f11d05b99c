"""`RandomState`: the public random streams (latent codes, fake labels) continue across `resume=`."""
from __future__ import annotations

import random

import lightning.pytorch as pl
import numpy as np
import torch

KEY = "random_state"


class RandomState(pl.Callback):
    """Saves the global Python, NumPy, torch (and CUDA) generator states with every checkpoint and restores
    them on resume, so a resumed run draws the latent codes and fake labels an uninterrupted run would have.

    The secret noise of the privacy mechanisms is NOT among them: it comes from its own generator, seeded from
    the operating system on every start (aggregation/noise.py), so no noise value is ever drawn twice."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint[KEY] = {"python": random.getstate(), "numpy": np.random.get_state(),
                           "torch": torch.get_rng_state(),
                           "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        state = checkpoint.get(KEY)
        if state is None:  # a checkpoint from before this callback: keep the seeded streams
            return
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(torch.as_tensor(state["torch"]).clone())
        if state["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([torch.as_tensor(s).clone() for s in state["cuda"]])
