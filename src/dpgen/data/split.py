"""Train/test splits for datasets that come without one, and the private validation split of the training data."""
from __future__ import annotations

import numpy as np
import torch

from dpgen.data.partition import record_hashes

PRIVATE_VAL = b"dpgen:privateval"  # the personalisation of the validation split's hash (16 bytes)


def stratified_split(labels: torch.Tensor, test_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train indices, test indices), sorted: each class sends round(n_c * test_fraction) records to test."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    generator = torch.Generator().manual_seed(int(seed))
    train, test = [], []
    for c in labels.unique():
        members = torch.nonzero(labels == c).flatten()
        members = members[torch.randperm(len(members), generator=generator)]
        n_test = round(len(members) * test_fraction)
        test.append(members[:n_test])
        train.append(members[n_test:])
    return torch.cat(train).sort().values, torch.cat(test).sort().values


def private_val_split(records: torch.Tensor, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(kept indices, validation indices), sorted: a record is in the validation split iff its keyed hash (its own
    personalisation, independent of the teacher hash) is below `fraction` of the hash range. A function of the
    record and the seed alone, as the teacher partitions (data/partition.py): adding or removing a record leaves
    every other record on its side, and the split's size is Binomial(N, fraction)."""
    if not 0 < fraction < 1:
        raise ValueError(f"the private validation fraction must be in (0, 1), got {fraction}")
    held = torch.from_numpy(record_hashes(records, seed, PRIVATE_VAL) < np.uint64(int(fraction * 2.0**64)))
    return torch.nonzero(~held).flatten(), torch.nonzero(held).flatten()
