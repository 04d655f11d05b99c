import pytest
import torch

from dpgen.data.base import TensorData
from dpgen.data.partition import (BLANK, TeacherBatchSampler, TeacherRecords, draw_batches, padded_table,
                                  partition_indices, record_teachers)


def records(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 4, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def owners(parts, n):
    owner = torch.full((n,), -1, dtype=torch.long)
    for t, p in enumerate(parts):
        owner[p] = t
    return owner


def test_partitions_are_disjoint_and_cover_everything():
    x, y = records(103)
    parts = partition_indices(x, 10, seed=3)
    assert len(parts) == 10 and all(p.dtype == torch.long for p in parts)
    assert all(torch.equal(record_teachers(x, 10, seed=3)[p], torch.full((len(p),), t)) for t, p in enumerate(parts))
    every = torch.cat(parts)
    assert len(every) == 103 and torch.equal(every.sort().values, torch.arange(103))  # disjoint + covering


def test_a_record_keeps_its_teacher_when_another_is_added_or_removed():
    """Add/remove neighbours: the teacher of a record is a function of the record (and the seed) alone."""
    x, y = records(500)
    owner = record_teachers(x, 40, seed=1)
    removed = torch.cat([torch.arange(0, 217), torch.arange(218, 500)])
    assert torch.equal(record_teachers(x[removed], 40, seed=1), owner[removed])
    shuffled = torch.randperm(500)
    assert torch.equal(record_teachers(x[shuffled], 40, seed=1), owner[shuffled])
    assert not torch.equal(record_teachers(x, 40, seed=2), owner)  # the key changes the assignment


def test_partition_sizes_are_those_of_a_uniform_hash():
    """60,000 records over 4000 teachers: sizes Binomial(60000, 1/4000), mean 15, sd ~3.9."""
    x = torch.arange(60_000, dtype=torch.float32)[:, None]  # distinct records
    sizes = torch.bincount(record_teachers(x, 4000, seed=0), minlength=4000).double()
    assert sizes.sum() == 60_000 and abs(sizes.mean() - 15) < 1e-9
    assert 3.5 < sizes.std() < 4.3 and sizes.min() >= 1


def test_batches_draw_from_own_records_only_in_the_documented_way():
    parts = [torch.tensor([4, 9, 2, 7]), torch.tensor([1, 3]), torch.tensor([], dtype=torch.long),
             torch.tensor([0, 5, 6, 8, 10, 11])]
    table, sizes = padded_table(parts)
    assert torch.equal(sizes, torch.tensor([4, 2, 0, 6]))
    for step in range(20):
        batch = draw_batches(table, sizes, 4, torch.rand(4, 4, generator=torch.Generator().manual_seed(step)))
        assert batch.shape == (4, 4)
        assert sorted(batch[0].tolist()) == [2, 4, 7, 9]  # exactly b records: the whole partition, shuffled
        assert torch.equal(batch[1, 2:], batch[1, :2]) and sorted(batch[1, :2].tolist()) == [1, 3]  # then again
        assert torch.equal(batch[2], torch.full((4,), BLANK))  # no records: blank ones
        assert len(set(batch[3].tolist())) == 4 and set(batch[3].tolist()) <= set(parts[3].tolist())


def test_draws_are_uniform_subsets():
    """A teacher with 6 records and b = 2: each of the 15 pairs about equally often."""
    table, sizes = padded_table([torch.arange(6)])
    counts = {}
    for step in range(3000):
        pair = draw_batches(table, sizes, 2, torch.rand(1, 2, generator=torch.Generator().manual_seed(step)))[0]
        counts[tuple(sorted(pair.tolist()))] = counts.get(tuple(sorted(pair.tolist())), 0) + 1
    assert len(counts) == 15 and min(counts.values()) > 150 and max(counts.values()) < 250  # 200 expected


def test_other_teachers_batches_do_not_change_when_a_record_is_removed():
    x, y = records(400)
    parts = partition_indices(x, 20, seed=0)
    gone = int(parts[7][3])
    keep = torch.cat([torch.arange(gone), torch.arange(gone + 1, 400)])
    smaller = partition_indices(x[keep], 20, seed=0)
    sampler, other = TeacherBatchSampler(parts, 8, seed=5), TeacherBatchSampler(smaller, 8, seed=5)
    for _ in range(3):
        for a, b in zip(sampler, other):
            rest = torch.arange(20) != 7
            assert torch.equal(a[rest], keep[b[rest]])  # the same records (indices shift by the removal)


def test_batches_do_not_depend_on_the_order_records_are_stored_in():
    x, _ = records(300)
    shuffled = torch.randperm(300, generator=torch.Generator().manual_seed(9))
    a = next(iter(TeacherBatchSampler(partition_indices(x, 12, seed=0), 6, seed=1)))
    b = next(iter(TeacherBatchSampler(partition_indices(x[shuffled], 12, seed=0), 6, seed=1)))
    assert torch.equal(a, shuffled[b])  # the same records of the same teachers, in the same order


def test_sampler_is_a_function_of_seed_and_step_and_resumes():
    x, y = records(90)
    parts = partition_indices(x, 3, seed=0)
    sampler = TeacherBatchSampler(parts, batch_size=15, seed=3)
    assert len(sampler) == 2  # about one pass over the mean partition of 30
    epochs = [list(sampler) for _ in range(3)]
    assert all(b.shape == (3, 15) for e in epochs for b in e)
    assert not torch.equal(epochs[1][0], epochs[2][0])
    fresh = TeacherBatchSampler(parts, batch_size=15, seed=3)
    fresh.set_epoch(2)  # as Lightning after resume=
    assert all(torch.equal(a, b) for a, b in zip(list(fresh), epochs[2]))
    with pytest.raises(ValueError, match="batch_size"):
        TeacherBatchSampler(parts, 0, seed=0)


def test_4000_teachers_of_15_records_see_their_whole_partition():
    # G-PATE appendix E, eps = 1: 4000 teachers, batch 15 on 60,000 records: a teacher holding 15 records sees
    # all of them every step; every row comes from its own partition
    x = torch.arange(60_000, dtype=torch.float32)[:, None]
    parts = partition_indices(x, 4000, seed=0)
    batch, = list(TeacherBatchSampler(parts, batch_size=15, seed=0))
    assert batch.shape == (4000, 15)
    assert torch.equal(owners(parts, 60_000)[batch], torch.arange(4000)[:, None].expand(4000, 15))
    for t in [t for t, p in enumerate(parts) if len(p) == 15][:20]:
        assert torch.equal(batch[t].sort().values, parts[t].sort().values)


def test_blank_records_are_public_zeros():
    data = TensorData(torch.rand(5, 1, 2, 2), torch.tensor([1, 2, 1, 2, 1]))
    x, y = TeacherRecords(data)[torch.tensor([[3, BLANK], [BLANK, 4]])]
    assert torch.equal(x[0, 0], data.x[3]) and torch.equal(x[1, 1], data.x[4]) and y[0, 0] == 2
    assert x[0, 1].abs().sum() == 0 and x[1, 0].abs().sum() == 0 and y[0, 1] == 0 and y[1, 0] == 0
