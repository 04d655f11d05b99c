"""Checkpoints that fit in memory and survive a crash: `torch.save` straight into a temporary file, then rename.

Lightning's own `TorchCheckpointIO` serialises the whole checkpoint into an in-memory buffer before writing
it, and loads it back into memory in one piece: a second copy of every tensor. G-PATE's teacher ensemble is
most of the machine's memory (4000 MNIST teachers: 17.8 GB), so that copy is what killed its runs at the first
checkpoint. Here `torch.save` streams each tensor's storage from where it lives into the file, and loading
memory-maps the file, so neither direction holds a second copy of the ensemble. A checkpoint that does not fit
on the disk is skipped with an error in the log (the previous one is kept) instead of ending a long run.
"""
from __future__ import annotations

import copy
import errno
import logging
import os
import pickle
import shutil
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from dpgen.files import atomic_write

log = logging.getLogger(__name__)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class CheckpointError(ValueError):
    """A checkpoint that cannot be read (truncated, corrupted or not a checkpoint): never loaded in part."""


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """`torch.save(obj)` into `path` atomically (dpgen.files): a kill or a full disk during the write leaves the
    previous file whole. Tensors are written from their own storage, chunk by chunk: no in-memory copy."""
    atomic_write(path, lambda f: torch.save(obj, f))


MAPPED_BYTES = 256 * 2**20  # tensors at least this large stay memory-mapped when loaded; smaller ones are copied
MODEL_KEY = "state_dict"  # a Lightning checkpoint's model tensors


def load_checkpoint_file(path: str | os.PathLike, map_location=None, mapped_bytes: int = MAPPED_BYTES) -> dict:
    """A checkpoint written by `atomic_save` (or `torch.save`), memory-mapped: the model's tensors (its
    "state_dict", the teacher ensemble's stacks among them) and other large tensors are read from the file when
    they are copied into the model, not first into memory; the ensemble copies a chunk of teachers at a time and
    gives the file's pages back. Small tensors outside the state dict (optimizer states, which an optimizer may
    keep by reference) are copied at once, so that they do not keep the whole file mapped (and its disk space
    taken) after the checkpoint is replaced. A file that is not a whole checkpoint raises `CheckpointError`
    naming it."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file not found: {path} (resume= takes <run dir>/checkpoints/last.ckpt)")
    try:
        # Lightning checkpoints hold hyper-parameters and callback states, not only tensors (weights_only=False);
        # load only checkpoints your own runs wrote.
        checkpoint = torch.load(path, map_location=map_location, mmap=True, weights_only=False)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted and was not loaded ({err}); "
                              f"resume from another checkpoint, or start a new run") from err
    if isinstance(checkpoint, dict) and MODEL_KEY in checkpoint:  # load_state_dict copies these into the model
        return {k: v if k == MODEL_KEY else unmap_small(v, mapped_bytes) for k, v in checkpoint.items()}
    return unmap_small(checkpoint, mapped_bytes)


def map_tensors(obj, fn):
    """`obj` with every tensor t in its dicts, lists and tuples replaced by fn(t); other objects (namedtuples
    included) are kept as they are."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        out = copy.copy(obj)  # keeps the type, and a state dict's _metadata
        out.update((k, map_tensors(v, fn)) for k, v in obj.items())
        return out
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(map_tensors(v, fn) for v in obj)
    return obj


def unmap_small(obj, mapped_bytes: int):
    """`obj` with every tensor smaller than `mapped_bytes` replaced by an in-memory copy."""
    return map_tensors(obj, lambda t: t.clone() if t.untyped_storage().nbytes() < mapped_bytes else t)


def tensor_bytes(obj) -> int:
    """Bytes of the distinct tensor storages in `obj`: about a checkpoint's file size."""
    storages: dict[int, int] = {}

    def note(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    map_tensors(obj, note)
    return sum(storages.values())


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO (`Trainer(plugins=[AtomicCheckpointIO()])`) with `atomic_save` and
    `load_checkpoint_file`: no second copy of the model in memory either way, and a crash while writing
    leaves the previous checkpoint usable. A checkpoint the disk cannot hold (too little free space before the
    write, or the disk filling up during it) is not written: the error is logged, the previous checkpoint
    stays, and training goes on; a periodic checkpoint is a safety net, not worth a run."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        need, free = tensor_bytes(checkpoint), shutil.disk_usage(path.parent).free
        if need > free:
            return self.skipped(path, f"it needs about {need / 1e9:.2f} GB and {free / 1e9:.2f} GB are free")
        try:
            atomic_save(checkpoint, path)
        except OSError as err:
            if err.errno not in DISK_FULL:
                raise
            self.skipped(path, f"the disk filled up while writing it ({err.strerror}; it needs about "
                               f"{need / 1e9:.2f} GB)")

    @staticmethod
    def skipped(path: Path, why: str) -> None:
        kept = "the previous checkpoint there is kept" if path.exists() else "no checkpoint exists there yet"
        log.error(f"checkpoint {path} NOT written: {why}; {kept}. Training goes on: free disk space (or set "
                  f"checkpoint_every_n_steps / hydra.run.dir to a larger disk) to have the next one written")

    def load_checkpoint(self, path, map_location=None, weights_only: bool | None = None) -> dict[str, Any]:
        return load_checkpoint_file(path, map_location=map_location)
