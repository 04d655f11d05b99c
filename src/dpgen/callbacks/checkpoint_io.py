"""Checkpoints that fit in memory and survive a crash: `torch.save` straight into a temporary file, then rename.

Lightning's own `TorchCheckpointIO` serialises the whole checkpoint into an in-memory buffer before writing
it, and loads it back into memory in one piece: a second copy of every tensor. G-PATE's teacher ensemble is
most of the machine's memory (4000 MNIST teachers: 17.8 GB), so that copy is what killed its runs at the first
checkpoint. Here `torch.save` streams each tensor's storage from where it lives into the file, and loading
memory-maps the file, so neither direction holds a second copy of the ensemble.
"""
from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from dpgen.files import atomic_write


class CheckpointError(ValueError):
    """A checkpoint that cannot be read (truncated, corrupted or not a checkpoint): never loaded in part."""


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """`torch.save(obj)` into `path` atomically (dpgen.files): a kill or a full disk during the write leaves the
    previous file whole. Tensors are written from their own storage, chunk by chunk: no in-memory copy."""
    atomic_write(path, lambda f: torch.save(obj, f))


def load_checkpoint_file(path: str | os.PathLike, map_location=None) -> dict:
    """A checkpoint written by `atomic_save` (or `torch.save`), memory-mapped: tensors are read from the file
    when they are copied into the model, not first into memory. A file that is not a whole checkpoint raises
    `CheckpointError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file not found: {path} (resume= takes <run dir>/checkpoints/last.ckpt)")
    try:
        # Lightning checkpoints hold hyper-parameters and callback states, not only tensors (weights_only=False);
        # load only checkpoints your own runs wrote.
        return torch.load(path, map_location=map_location, mmap=True, weights_only=False)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted and was not loaded ({err}); "
                              f"resume from another checkpoint, or start a new run") from err


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO (`Trainer(plugins=[AtomicCheckpointIO()])`) with `atomic_save` and
    `load_checkpoint_file`: no second copy of the model in memory either way, and a crash while writing
    leaves the previous checkpoint usable."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        atomic_save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only: bool | None = None) -> dict[str, Any]:
        return load_checkpoint_file(path, map_location=map_location)
