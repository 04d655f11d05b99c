import lightning.pytorch as pl
import pytest
import torch

from dpgen.data.base import DPGenDataModule, TensorData, default_root


class Numbered(DPGenDataModule):
    """Record i has x = [i] and y = i % 3, so a batch tells which records it holds."""

    name, kind, shape, num_classes, class_names = "numbered", "table", (1,), 3, ["a", "b", "c"]

    def __init__(self, n: int = 100, **common):
        super().__init__(**common)
        self.n = n

    def load(self):
        train, test = torch.arange(self.n), torch.arange(self.n, self.n + 10)
        return TensorData(train.float()[:, None], train % 3), TensorData(test.float()[:, None], test % 3)


def test_default_root_is_env_or_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("DPGEN_DATA", str(tmp_path))
    assert default_root() == tmp_path and Numbered().root == tmp_path
    monkeypatch.delenv("DPGEN_DATA")
    assert default_root().parts[-2:] == (".cache", "dpgen")
    assert Numbered(root="~/x").root.name == "x" and "~" not in str(Numbered(root="~/x").root)


def test_tensor_data_converts_uint8_pixels_per_batch():
    data = TensorData(torch.tensor([[0, 51], [255, 102]], dtype=torch.uint8), torch.tensor([1, 0]))
    x, y = data[torch.tensor([1])]
    assert x.dtype == torch.float32 and torch.equal(x, torch.tensor([[1.0, 0.4]]))  # 255/255, 102/255 = 0.4
    assert torch.equal(y, torch.tensor([0]))
    assert torch.allclose(data.x, torch.tensor([[0.0, 0.2], [1.0, 0.4]]))  # 51 / 255 = 0.2
    assert data.stored.dtype == torch.uint8 and len(data.subset(torch.tensor([0]))) == 1


def test_single_loader_shuffles_full_batches_without_replacement():
    dm = Numbered(n=100, batch_size=30, seed=4)
    dm.setup()
    batches = list(dm.train_dataloader())
    assert len(batches) == 3  # floor(100 / 30): the last partial batch is dropped
    xs = torch.cat([x for x, _ in batches]).flatten().long()
    assert all(x.shape == (30, 1) for x, _ in batches)
    assert len(xs.unique()) == 90 and not torch.equal(xs, torch.arange(90))  # no repeats, shuffled
    assert all(torch.equal(y, x.flatten().long() % 3) for x, y in batches)  # labels travel with records
    again = Numbered(n=100, batch_size=30, seed=4)
    again.setup()
    assert torch.equal(next(iter(again.train_dataloader()))[0], batches[0][0])  # same seed, same order


def test_teacher_loader_rows_hold_only_their_partition():
    dm = Numbered(n=100, batch_size=8, n_teachers=6, seed=0)
    dm.setup()
    # hashed partitions of about 100 / 6 records; b = 8 fixed; an epoch is round(16.7 / 8) = 2 batches
    batches = list(dm.train_dataloader())
    assert len(batches) == 2 and sum(len(p) for p in dm.partitions) == 100
    for x, y in batches:
        assert x.shape == (6, 8, 1) and y.shape == (6, 8)
        for t in range(6):
            assert set(x[t].flatten().long().tolist()) <= set(dm.partitions[t].tolist())
            assert len(x[t].unique()) == min(8, len(dm.partitions[t]))  # distinct while the partition lasts
        assert torch.equal(y, x[..., 0].long() % 3)


def test_teacher_data_is_exactly_one_partition():
    dm = Numbered(n=50, n_teachers=4, seed=1)
    dm.setup()
    part = dm.teacher_data(2)
    assert torch.equal(part.x.flatten().long(), dm.partitions[2])
    assert torch.equal(part.y, dm.partitions[2] % 3)


def test_partitions_need_setup_and_setup_runs_once():
    dm = Numbered()
    with pytest.raises(RuntimeError, match="setup"):
        dm.partitions
    dm.setup()
    first = dm.train_data
    dm.setup("fit")
    assert dm.train_data is first


def test_test_loader_is_plain_and_ordered():
    dm = Numbered(n=20, batch_size=4)
    dm.setup()
    xs = torch.cat([x for x, _ in dm.test_dataloader()]).flatten()
    assert torch.equal(xs, torch.arange(20, 30).float())
    assert len(list(dm.test_dataloader())) == 3  # 10 records in batches of 4, last one kept


def test_no_validation_loader_over_the_real_test_set():
    # Nothing selects models on the real test set, so there is no validation loader.
    dm = Numbered(n=20, batch_size=4)
    dm.setup()
    with pytest.raises(Exception, match="val_dataloader"):
        dm.val_dataloader()


class Recorder(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.shapes = []

    def training_step(self, batch, batch_idx):
        self.shapes.append((tuple(batch[0].shape), tuple(batch[1].shape)))

    def configure_optimizers(self):
        return None


def test_lightning_trainer_receives_teacher_batches():
    dm, model = Numbered(n=100, batch_size=8, n_teachers=6), Recorder()
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(model, datamodule=dm)
    assert model.shapes == [((6, 8, 1), (6, 8))] * 4  # 2 epochs x 2 batches
