"""What every dpgen datamodule shares: the in-memory dataset, the teacher loaders, the data root."""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from dpgen.data.partition import TeacherBatchSampler, TeacherRecords, partition_indices
from dpgen.data.split import private_val_descriptor, private_val_split


def default_root() -> Path:
    """`$DPGEN_DATA` when set, else `~/.cache/dpgen`."""
    return Path(os.environ.get("DPGEN_DATA") or "~/.cache/dpgen").expanduser()


def as_float(stored: torch.Tensor) -> torch.Tensor:
    """uint8 pixels 0..255 -> float32 k/255; float32 is returned as is."""
    return stored.float().div_(255) if stored.dtype == torch.uint8 else stored


class TensorData(Dataset):
    """Records in memory: `x` float32 (images (N,C,H,W) in [0,1], tables (N,F)), `y` int64 labels.

    Images may be stored as uint8 (`stored`, CelebA: 4x less memory, possibly a memory-mapped cache);
    indexing converts only the selected records, while `x` converts everything on each access.
    Index with an int, a slice, or an index tensor of any shape: `data[idx]` -> `(x[idx], y[idx])`.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        if x.dtype not in (torch.uint8, torch.float32):
            raise TypeError(f"records must be uint8 pixels or float32, got {x.dtype}")
        if len(x) != len(y):
            raise ValueError(f"{len(x)} records but {len(y)} labels")
        self.stored = x
        self.y = y.long()

    @property
    def x(self) -> torch.Tensor:
        return as_float(self.stored)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, idx):
        if isinstance(idx, list):
            idx = torch.as_tensor(idx, dtype=torch.long)
        return as_float(self.stored[idx]), self.y[idx]

    def subset(self, idx: torch.Tensor) -> TensorData:
        return TensorData(self.stored[idx], self.y[idx])


class DPGenDataModule(LightningDataModule, ABC):
    """Base of all datamodules. Subclasses set `name`, `kind` ("image"/"table"), `shape`, `num_classes`,
    `class_names` in `__init__` (without reading the data) and implement `load()`.

    After `setup()`: `train_data`, `test_data` (`TensorData`) and `partitions` (one index tensor per teacher).
    `private_val` > 0 holds that share of the training records out (`data.split.private_val_split`, a keyed hash of
    each record) as `private_val_data` before anything else sees them: `train_data`, the partitions and every
    loader then hold the other records only (eval.selection=private_val, docs/EVALUATION.md); `data_hash` is the
    hash of the resolved data configuration (data.split.config_sha256), part of the split's descriptor
    (`private_val_split_descriptor`), which privacy.json and checkpoints record.
    `train_dataloader()` yields `(x, y)` batches of `batch_size` when `n_teachers == 1`, else teacher batches
    `x: (n_teachers, b, *shape)`, `y: (n_teachers, b)`, b = `batch_size`, where row t holds only teacher t's
    records (`data.partition`: a teacher without records gets public blank ones).
    """

    name: str
    kind: str
    shape: tuple[int, ...]
    num_classes: int
    class_names: list[str]

    def __init__(self, root: str | None = None, batch_size: int = 64, n_teachers: int = 1, seed: int = 0,
                 num_workers: int = 0, allow_data_dependent_preprocessing: bool = False, private_val: float = 0.0,
                 data_hash: str | None = None):
        super().__init__()
        if batch_size < 1 or n_teachers < 1 or num_workers < 0:
            raise ValueError(f"need batch_size >= 1, n_teachers >= 1, num_workers >= 0; got {batch_size}, "
                             f"{n_teachers}, {num_workers}")
        self.root = Path(root).expanduser() if root else default_root()
        self.batch_size, self.n_teachers, self.seed = int(batch_size), int(n_teachers), int(seed)
        self.num_workers = int(num_workers)
        self.allow_data_dependent_preprocessing = bool(allow_data_dependent_preprocessing)
        self.private_val, self.data_hash = float(private_val), data_hash
        self.train_data: TensorData | None = None
        self.private_val_data: TensorData | None = None
        self.all_train_data: TensorData | None = None
        self.test_data: TensorData | None = None
        self._partitions: list[torch.Tensor] | None = None

    @abstractmethod
    def load(self) -> tuple[TensorData, TensorData]:
        """Find, check and read the files; return the training and test records."""

    def setup(self, stage: str | None = None) -> None:
        if self.train_data is not None:
            return
        train, test = self.load()
        self.all_train_data = train
        if self.private_val > 0:
            kept, held = private_val_split(train.stored, self.private_val, self.seed)
            self.private_val_data = train.subset(held)
            train = train.subset(kept)
        self._partitions = partition_indices(train.stored, self.n_teachers, self.seed)
        self.train_data, self.test_data = train, test

    @property
    def private_val_split_descriptor(self) -> dict | None:
        """The descriptor of the held-out private validation split (data.split.private_val_descriptor), None when
        none is held out."""
        if not self.private_val > 0:
            return None
        return private_val_descriptor(self.name, self.private_val, self.seed, self.data_hash)

    @property
    def partitions(self) -> list[torch.Tensor]:
        if self._partitions is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before partitions are known")
        return self._partitions

    def teacher_data(self, t: int) -> TensorData:
        """The training records of teacher t only."""
        return self.train_data.subset(self.partitions[t])

    def train_dataloader(self) -> DataLoader:
        if self.n_teachers == 1:
            # Full batches only: a constant batch size keeps BatchNorm and sampling rates well defined.
            generator = torch.Generator().manual_seed(self.seed)
            sampler = BatchSampler(RandomSampler(range(len(self.train_data)), generator=generator),
                                   min(self.batch_size, len(self.train_data)), drop_last=True)
        else:
            return self._loader(TeacherRecords(self.train_data),
                                TeacherBatchSampler(self.partitions, self.batch_size, self.seed))
        return self._loader(self.train_data, sampler)

    def test_dataloader(self) -> DataLoader:
        n = len(self.test_data)
        return self._loader(self.test_data, BatchSampler(range(n), min(self.batch_size, n), drop_last=False))

    def _loader(self, data: Dataset, sampler) -> DataLoader:
        # batch_size=None: the sampler yields whole batches of indices, gathered by one tensor index each.
        return DataLoader(data, sampler=sampler, batch_size=None, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)
