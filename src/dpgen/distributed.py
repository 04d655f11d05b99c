"""G-PATE's teachers split over several processes (`torchrun ... train.py trainer=ddp`): which teachers a process
holds, and checkpoints with one file per process.

The vote histograms are sums over teachers, so every process votes with its own slice of the teachers and the
histograms are all-reduced exactly (aggregation/dpgradagg.py); the generator, its fake batch and the privacy
noise come from process 0 alone."""
from __future__ import annotations

import os
from datetime import timedelta

from lightning.pytorch.strategies import DDPStrategy


def process_rank() -> tuple[int, int]:
    """(rank, world size) of this process as torchrun sets them (RANK, WORLD_SIZE); (0, 1) without torchrun."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def teacher_slice(n_teachers: int, rank: int, world_size: int) -> tuple[int, int]:
    """(first, count): the contiguous teachers process `rank` of `world_size` holds, as even as possible."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not one of {world_size} processes")
    if n_teachers < world_size:
        raise ValueError(f"{n_teachers} teachers cannot be split over {world_size} processes: use at most "
                         f"{n_teachers} processes")
    first, end = rank * n_teachers // world_size, (rank + 1) * n_teachers // world_size
    return first, end - first


def leave_process_group() -> None:
    """After training under torchrun: every process waits for the others, then closes the process group, so that
    none exits while another still holds a connection to it (gloo aborts a process whose peer vanished mid-use).
    Nothing happens in a single process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def rank_path(path, rank: int) -> str:
    """The checkpoint file of process `rank`: `path` itself for rank 0, `<path>.rank<r>` for the others."""
    return str(path) if rank == 0 else f"{path}.rank{rank}"


class TeacherShardsDDP(DDPStrategy):
    """Lightning's DDP in which every process writes, reads and removes its own checkpoint file (`rank_path`):
    each holds different teachers, so rank 0's file alone cannot resume a run. The generator and the ledger are
    the same in every file.

    Collectives wait up to a day (Lightning's default: 30 minutes): after training, the other processes wait in
    `leave_process_group` while process 0 evaluates, which takes hours with eval=reference on a CPU. A process
    that fails still ends the run at once (torchrun stops the others)."""

    def __init__(self, *args, timeout: timedelta = timedelta(days=1), **kwargs):
        super().__init__(*args, timeout=timeout, **kwargs)

    def save_checkpoint(self, checkpoint, filepath, storage_options=None) -> None:
        self.checkpoint_io.save_checkpoint(checkpoint, rank_path(filepath, self.global_rank),
                                           storage_options=storage_options)

    def remove_checkpoint(self, filepath) -> None:
        self.checkpoint_io.remove_checkpoint(rank_path(filepath, self.global_rank))

    def load_checkpoint(self, checkpoint_path, weights_only=None):
        return super().load_checkpoint(rank_path(checkpoint_path, self.global_rank), weights_only=weights_only)
