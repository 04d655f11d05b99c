"""Disjoint teacher partitions of the training set and the sampler that feeds all teachers at once.

PATE-GAN Algorithm 1 line 3 ("Partition dataset into k subsets D_1..D_k of size |D|/k") and G-PATE
Section 4 / Algorithm 1 input ("disjoint subsets of sensitive data S_1..S_n"): a record influences exactly
one teacher, which is what the per-teacher sensitivity of the vote aggregation relies on.
"""
from __future__ import annotations

import torch


def partition_indices(n_records: int, n_teachers: int, seed: int) -> list[torch.Tensor]:
    """Split record indices 0..n_records-1 into `n_teachers` disjoint sets covering all of them.

    Sizes differ by at most one (the first n_records % n_teachers teachers get one more record); the split
    is a function of `seed` only. Each set is returned sorted, as an int64 tensor.
    """
    if n_teachers < 1:
        raise ValueError(f"n_teachers must be >= 1, got {n_teachers}")
    if n_records < n_teachers:
        raise ValueError(f"cannot give each of {n_teachers} teachers a record: only {n_records} records")
    generator = torch.Generator().manual_seed(int(seed))
    order = torch.randperm(n_records, generator=generator)
    return [part.sort().values for part in torch.tensor_split(order, n_teachers)]


class TeacherBatchSampler:
    """Yields `(n_teachers, b)` index tensors: row t holds only indices of partition t.

    b = min(batch_size, smallest partition). Within an epoch every teacher samples without replacement
    from its own partition; an epoch is floor(smallest partition / b) batches. All teachers are shuffled
    together (one argsort of a padded table), never in a Python loop over teachers.

    The shuffle of epoch e is a function of (seed, e) alone. Each pass moves to the next epoch; Lightning also
    calls `set_epoch` before every epoch, after `resume=` too, so a resumed run sees the batches an
    uninterrupted run would have seen.
    """

    def __init__(self, partitions: list[torch.Tensor], batch_size: int, seed: int):
        sizes = torch.tensor([len(p) for p in partitions])
        smallest = int(sizes.min())
        self.batch = min(int(batch_size), smallest)
        self.n_batches = smallest // self.batch
        width = int(sizes.max())
        self.table = torch.zeros(len(partitions), width, dtype=torch.long)
        self.valid = torch.arange(width).expand(len(partitions), width) < sizes[:, None]
        self.table[self.valid] = torch.cat(list(partitions))
        self.seed, self.epoch = int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        keys = torch.rand(self.table.shape, generator=generator).masked_fill_(~self.valid, 2.0)
        used = self.n_batches * self.batch  # <= smallest size, so padding (key 2.0, sorted last) is never used
        epoch = self.table.gather(1, keys.argsort(dim=1)[:, :used])
        self.epoch += 1
        yield from epoch.split(self.batch, dim=1)
