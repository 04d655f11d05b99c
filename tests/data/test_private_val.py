"""The private validation split: a keyed hash of each record, held out before the teacher partitions."""
import torch

from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.data.partition import record_teachers
from dpgen.data.split import private_val_split


class Noise(DPGenDataModule):
    name, kind, shape, num_classes, class_names = "noise", "image", (1, 4, 4), 2, ["0", "1"]

    def load(self):
        generator = torch.Generator().manual_seed(1)
        x = torch.randint(0, 256, (2000, 1, 4, 4), dtype=torch.uint8, generator=generator)
        return TensorData(x, torch.arange(2000) % 2), TensorData(x[:10], torch.zeros(10))


def rows(data: TensorData) -> set[bytes]:
    return {bytes(row) for row in data.stored.flatten(1).numpy()}


def test_the_split_is_disjoint_from_every_teachers_records_and_holds_its_share():
    dm = Noise(n_teachers=7, private_val=0.2, seed=3)
    dm.setup()
    held = rows(dm.private_val_data)
    assert 300 < len(held) < 500  # Binomial(2000, 0.2): 400 +- 18
    assert len(dm.train_data) + len(dm.private_val_data) == 2000
    for t in range(7):
        assert not held & rows(dm.teacher_data(t))
    assert rows(dm.all_train_data) == held | rows(dm.train_data)
    loaded, _ = dm.load()
    assert torch.equal(dm.all_train_data.stored, loaded.stored)  # every record, in stored order (IS / FID)
    plain = Noise(n_teachers=7, seed=3)
    plain.setup()
    assert plain.private_val_data is None and len(plain.train_data) == 2000


def test_a_records_side_depends_on_the_record_alone_and_not_on_its_teacher_hash():
    x = torch.randint(0, 256, (3000, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    _, held = private_val_split(x, 0.3, seed=5)
    member = torch.zeros(3000, dtype=torch.bool)
    member[held] = True
    keep = torch.arange(3000)[torch.arange(3000) % 3 != 0]  # records removed: the others stay on their side
    _, held_after = private_val_split(x[keep], 0.3, seed=5)
    assert torch.equal(keep[held_after], keep[member[keep]])
    assert torch.equal(private_val_split(x.flip(0), 0.3, seed=5)[1], (2999 - held).flip(0))  # order plays no part
    teachers = record_teachers(x, 2, seed=5)
    share = [member[teachers == t].float().mean().item() for t in (0, 1)]
    assert all(abs(s - 0.3) < 0.04 for s in share)  # independent of the teacher hash of the same key
