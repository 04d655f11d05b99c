"""Disjoint teacher partitions of the training set and the sampler that feeds all teachers at once.

PATE-GAN Algorithm 1 line 3 ("Partition dataset into k subsets D_1..D_k") and G-PATE Section 4 / Algorithm 1
input ("disjoint subsets of sensitive data S_1..S_n"): a record influences exactly one teacher, which is what
the per-teacher sensitivity of the vote aggregation relies on.

Neighbouring data sets differ by one record added or removed (docs/PRIVACY.md). So that such a difference
changes one teacher only, a record's teacher is a keyed hash of the record itself (not of its position), and
teacher t's batch is drawn from teacher t's records alone with randomness that depends on the seed and the step
only: b records (b public), all of the partition in random order when it holds b, a random b of them when it
holds more, and every record once and then again at random when it holds fewer.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch.utils.data import Dataset

BLANK = -1  # index of a public blank record (zeros, label 0) in a teacher batch: the teacher has no records


def record_hashes(records: torch.Tensor, seed: int, purpose: bytes = b"") -> np.ndarray:
    """BLAKE2b of each record's feature bytes, keyed by the seed: (N,) uint64. Labels are not hashed, so a split
    that never reads some records' labels (PATE-TripleGAN's unlabelled part) does not read them here either.
    `purpose` (at most 16 bytes) is BLAKE2b's personalisation: hashes of different purposes are independent."""
    key = int(seed).to_bytes(16, "little", signed=True)
    rows = records.reshape(len(records), -1).contiguous().numpy().view(np.uint8).reshape(len(records), -1)
    digests = [hashlib.blake2b(row.tobytes(), digest_size=8, key=key, person=purpose).digest() for row in rows]
    return np.frombuffer(b"".join(digests), dtype="<u8")


def record_teachers(records: torch.Tensor, n_teachers: int, seed: int) -> torch.Tensor:
    """Teacher of each record: its keyed hash modulo n_teachers (int64 (N,)). A function of the record and the
    seed alone: adding or removing a record leaves every other record where it was. Partition sizes are
    Binomial(N, 1 / n_teachers)."""
    if n_teachers < 1:
        raise ValueError(f"n_teachers must be >= 1, got {n_teachers}")
    return torch.from_numpy((record_hashes(records, seed) % np.uint64(n_teachers)).astype(np.int64))


def partition_indices(records: torch.Tensor, n_teachers: int, seed: int) -> list[torch.Tensor]:
    """Record indices of each teacher (int64 tensors): disjoint, covering all records, by `record_teachers`,
    each in the order of the records' hashes, so that neither the teachers nor their batches depend on the order
    in which the records are stored."""
    if n_teachers < 1:
        raise ValueError(f"n_teachers must be >= 1, got {n_teachers}")
    hashes = record_hashes(records, seed)
    owner = hashes % np.uint64(n_teachers)
    order = torch.from_numpy(np.lexsort((hashes, owner)).astype(np.int64))  # by teacher, then by hash
    return list(order.split(np.bincount(owner.astype(np.int64), minlength=n_teachers).tolist()))


def padded_table(partitions: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, largest) index table, row t = partition t then padding, and the sizes (T,)."""
    sizes = torch.tensor([len(p) for p in partitions], dtype=torch.long)
    table = torch.full((len(partitions), max(int(sizes.max()), 1)), BLANK, dtype=torch.long)
    table[torch.arange(table.shape[1]).expand_as(table) < sizes[:, None]] = torch.cat(list(partitions))
    return table, sizes


def draw_batches(table: torch.Tensor, sizes: torch.Tensor, batch: int, uniforms: torch.Tensor) -> torch.Tensor:
    """(T, batch) record indices, row t from row t of `table` (first sizes[t] entries) only.

    `uniforms` (T, batch) in [0, 1), drawn independently of the data: entry (t, j) picks the j-th record of a
    partial Fisher-Yates shuffle of teacher t's records, so a teacher with n >= batch records gets `batch`
    distinct ones, with n < batch all n, then again in the same order; n = 0 gives BLANK."""
    rows = table.clone()
    for j in range(min(batch, rows.shape[1])):
        live = (sizes > j).nonzero().squeeze(1)
        left = sizes[live] - j  # records not yet drawn
        pick = j + torch.minimum((uniforms[live, j] * left).long(), left - 1)
        drawn = rows[live, pick]
        rows[live, pick] = rows[live, j]
        rows[live, j] = drawn
    position = torch.arange(batch)[None, :] % sizes.clamp(min=1)[:, None]
    return rows.gather(1, position).masked_fill_((sizes == 0)[:, None], BLANK)


class TeacherBatchSampler:
    """Yields `(n_teachers, b)` index tensors, b = `batch_size`: row t holds only indices of partition t.

    Batch i (counted over the whole run) is a function of (seed, i) and of each teacher's own records
    (`draw_batches`). An epoch is `len(self)` batches (about one pass over the mean partition; bookkeeping
    only). Lightning calls `set_epoch` before every epoch, after `resume=` too, so a resumed run sees the
    batches an uninterrupted run would have seen."""

    def __init__(self, partitions: list[torch.Tensor], batch_size: int, seed: int):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.table, self.sizes = padded_table(partitions)
        self.batch = int(batch_size)
        mean = float(self.sizes.double().mean())
        self.n_batches = max(1, round(mean / self.batch))
        self.seed, self.epoch = int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self):
        first = self.epoch * self.n_batches
        self.epoch += 1
        for i in range(first, first + self.n_batches):
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
            yield draw_batches(self.table, self.sizes, self.batch, torch.rand(len(self.table), self.batch,
                                                                              generator=generator))


class TeacherRecords(Dataset):
    """`data` indexed by teacher batches: an index BLANK gives the public blank record (zeros, label 0)."""

    def __init__(self, data):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, idx: torch.Tensor):
        blank = idx == BLANK
        x, y = self.data[idx.clamp(min=0)]
        if blank.any():
            x, y = x.clone(), y.clone()
            x[blank], y[blank] = 0, 0
        return x, y
