"""Train/test splits for datasets that come without one, and the private validation split of the training data."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import torch

from dpgen.data.partition import record_hashes

PRIVATE_VAL = b"dpgen:privateval"  # the personalisation of the validation split's hash (16 bytes)
# Keys of a data configuration that say where the same records are found or how they are batched, not which records
# or how they are transformed: left out of its hash, so that the same data read from another folder (or with
# another batch size) has the same split.
NOT_IN_HASH = ("root", "download", "num_workers", "batch_size", "n_teachers")


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


def config_sha256(data_config: dict) -> str:
    """SHA-256 of a resolved data configuration (not of the data): every key but NOT_IN_HASH, as sorted JSON. Two
    configurations with equal hashes read the same file layout with the same crop, resize, columns, scaling and
    test split, so a record's keyed hash, and hence its side of the private validation split, is the same."""
    kept = {key: value for key, value in data_config.items() if key not in NOT_IN_HASH}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def private_val_descriptor(name: str, fraction: float, seed: int, config_hash: str | None) -> dict:
    """What names a private validation split: the data set, the share, the seed of the keyed hash and the hash of
    the data configuration (config_sha256; None where the caller gave none, which matches no recorded split)."""
    return {"data": name, "fraction": float(fraction), "seed": int(seed), "config_sha256": config_hash}
