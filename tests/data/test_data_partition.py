import torch

import pytest

from dpgen.data.partition import TeacherBatchSampler, partition_indices


def test_partitions_are_disjoint_cover_everything_and_balanced():
    parts = partition_indices(103, 10, seed=3)
    # 103 = 10 * 10 + 3: three teachers get 11 records, seven get 10
    assert sorted(len(p) for p in parts) == [10] * 7 + [11] * 3
    every = torch.cat(parts)
    assert len(every) == 103 and torch.equal(every.sort().values, torch.arange(103))  # disjoint + covering
    assert all(p.dtype == torch.long for p in parts)


def test_partitions_are_deterministic_for_a_seed():
    a, b, c = (partition_indices(1000, 7, seed=s) for s in (5, 5, 6))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


def test_partition_rejects_more_teachers_than_records():
    with pytest.raises(ValueError, match="only 3 records"):
        partition_indices(3, 4, seed=0)


def test_teacher_batches_stay_in_own_partition_without_replacement():
    parts = partition_indices(103, 10, seed=1)
    sampler = TeacherBatchSampler(parts, batch_size=4, seed=2)
    # b = min(4, smallest partition 10) = 4; epoch = floor(10 / 4) = 2 batches
    batches = list(sampler)
    assert len(sampler) == len(batches) == 2 and all(b.shape == (10, 4) for b in batches)
    epoch = torch.cat(batches, dim=1)  # (10 teachers, 8 records)
    owner = torch.empty(103, dtype=torch.long)
    for t, p in enumerate(parts):
        owner[p] = t
    assert torch.equal(owner[epoch], torch.arange(10)[:, None].expand(10, 8))  # row t only from partition t
    assert len(epoch.flatten().unique()) == 80  # no record twice in an epoch, in one teacher or in two


def test_teacher_batch_shrinks_to_smallest_partition_and_epochs_differ():
    parts = partition_indices(25, 4, seed=0)  # sizes 7, 6, 6, 6
    sampler = TeacherBatchSampler(parts, batch_size=50, seed=0)
    first, = list(sampler)
    second, = list(sampler)
    assert first.shape == (4, 6)  # b = min(50, 6)
    assert not torch.equal(first, second)  # reshuffled every epoch
    again, = list(TeacherBatchSampler(parts, batch_size=50, seed=0))
    assert torch.equal(first, again)  # same seed, same sequence


def test_4000_teachers_of_15_records_see_each_record_once_per_epoch():
    # G-PATE appendix E, eps = 1: 4000 teachers, batch 15, MNIST's 60,000 records -> 15 records each,
    # so one batch is the whole epoch and holds every record exactly once.
    sampler = TeacherBatchSampler(partition_indices(60_000, 4000, seed=0), batch_size=15, seed=0)
    batch, = list(sampler)
    assert batch.shape == (4000, 15)
    assert torch.equal(batch.flatten().sort().values, torch.arange(60_000))


def test_epoch_shuffle_depends_on_seed_and_epoch_only():
    # a resumed run rebuilds its sampler; Lightning's set_epoch(e) must give it epoch e's batches again
    parts = partition_indices(60, 4, seed=0)
    sampler = TeacherBatchSampler(parts, batch_size=15, seed=3)
    epochs = [list(sampler)[0] for _ in range(3)]
    fresh = TeacherBatchSampler(parts, batch_size=15, seed=3)
    fresh.set_epoch(2)
    assert torch.equal(list(fresh)[0], epochs[2])
    assert not torch.equal(epochs[1], epochs[2])
