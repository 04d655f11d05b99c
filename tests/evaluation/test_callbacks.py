import csv
import json
from types import SimpleNamespace

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpgen.callbacks.downstream import DownstreamUtility, EvaluationCallback, flatten
from dpgen.callbacks.image_quality import ImageQuality
from dpgen.evaluation.fidelity import save_classifier, weights_hash
from dpgen.privacy.selection import SelectionBudgetError


class RealData(pl.LightningModule):
    """An ideal 'generator': `sample(n, labels)` returns real records of the requested labels."""

    def __init__(self, x, y, num_classes):
        super().__init__()
        self.automatic_optimization = False
        self.weight = nn.Parameter(torch.zeros(1))
        self.x, self.y, self.num_classes = x, y, num_classes
        self.rolled_back = 0  # steps a privacy budget would have rolled back

    def released_step(self, global_step):
        return global_step - self.rolled_back

    def sample(self, n, labels=None):
        labels = self.y[torch.randint(len(self.y), (n,))] if labels is None else labels
        rows = torch.empty(n, dtype=torch.long)
        for c in labels.unique():
            pool = (self.y == c).nonzero().ravel()
            rows[labels == c] = pool[torch.randint(len(pool), (int((labels == c).sum()),))]
        return self.x[rows], labels

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        self.manual_backward((self.weight - 1).pow(2).sum())
        optimizer.step()
        optimizer.zero_grad()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Data(pl.LightningDataModule):
    name, num_classes = "mnist_small", 10

    def __init__(self, train, test):
        super().__init__()
        self.train_data, self.test_data = SimpleNamespace(x=train[0], y=train[1]), SimpleNamespace(x=test[0], y=test[1])
        self.all_train_data, self.private_val_data = self.train_data, None
        self.private_val_split_descriptor = {"data": self.name, "fraction": 0.1, "seed": 0, "config_sha256": "c"}

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(64, 1)), batch_size=8)


class Recorder:
    def __init__(self):
        self.calls = []

    def log_metrics(self, metrics, step):
        self.calls.append((step, metrics))


class TableRecorder(Recorder):  # a logger with tables, as W&B's
    def __init__(self):
        super().__init__()
        self.tables = []

    def log_table(self, key, columns, data, step):
        self.tables.append((key, columns, data, step))


def fake_trainer(datamodule, step=7):
    return SimpleNamespace(is_global_zero=True, global_step=step, loggers=[Recorder(), TableRecorder()],
                           datamodule=datamodule)


def test_flatten_keeps_numbers_only():
    assert flatten({"a": {"b": 1, "c": "x"}, "d": 2.5, "e": True}, "p") == {"p/a/b": 1.0, "p/d": 2.5}


def test_downstream_runs_every_n_steps_and_at_the_end_and_logs(mnist, tmp_path):
    module = RealData(*mnist["train"], 10)
    callback = DownstreamUtility(every_n_steps=2, n_samples=400, max_epochs=2, patience=1)
    trainer = pl.Trainer(
        max_steps=4, logger=CSVLogger(tmp_path, name="run"), callbacks=[callback], accelerator="cpu",
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(module, datamodule=Data(mnist["train"], mnist["test"]))
    assert callback.results["step"] == 4 and callback.results["accuracy"] > 0.3  # real images: well above 0.1
    with open(tmp_path / "run" / "version_0" / "metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row.get("downstream/accuracy")]
    assert [int(row["step"]) for row in rows] == [2, 4, 4]  # steps 2 and 4, then the end of training


def separable_table(n: int, n_train: int):
    """n rows of 3 features whose first one is the label (-1 / 1): (x, y, a datamodule-like split)."""
    rng = np.random.default_rng(0)
    y = torch.arange(n) % 2
    x = torch.tensor(rng.normal(size=(n, 3)), dtype=torch.float32)
    x[:, 0] = 2 * y - 1
    split = SimpleNamespace(train_data=SimpleNamespace(x=x[:n_train], y=y[:n_train]),
                            test_data=SimpleNamespace(x=x[n_train:], y=y[n_train:]))
    return x, y, split


def test_tabular_downstream_and_rng_untouched():
    x, y, dm = separable_table(400, 300)
    trainer = fake_trainer(dm)
    callback = DownstreamUtility(n_samples=200)
    state = torch.get_rng_state()
    results = callback.run(trainer, RealData(x[:300], y[:300], 2))
    assert torch.equal(torch.get_rng_state(), state)
    assert results["average"]["auroc"] == 1.0 and results["step"] == 7
    step, logged = trainer.loggers[0].calls[0]
    assert step == 7 and logged["downstream/mlp/auroc"] == 1.0
    assert trainer.loggers[1].calls == trainer.loggers[0].calls  # every logger gets the scalars
    key, columns, data, step = trainer.loggers[1].tables[0]  # a logger with tables also gets them as one table
    assert key == "downstream/table" and columns == ["metric", "value"] and step == 7
    assert dict(data) == logged


def test_results_name_the_step_of_the_released_generator():
    """After PrivacyBudget rolled a step back, the generator evaluated at the end is that of the step before; the
    loggers keep the trainer's step (their steps only grow)."""
    x, y, dm = separable_table(400, 300)
    trainer, module = fake_trainer(dm), RealData(x[:300], y[:300], 2)
    module.rolled_back = 1
    results = DownstreamUtility(n_samples=200).run(trainer, module)
    assert results["step"] == 6 and trainer.loggers[0].calls[0][0] == 7


def test_image_quality_uses_the_cached_domain_classifier(mnist, classifier, tmp_path):
    save_classifier(classifier, "mnist_small", tmp_path / "classifiers", {"test_accuracy": 0.9, "epochs": 3})
    trainer = fake_trainer(Data(mnist["train"], mnist["test"]))
    callback = ImageQuality(n_samples=500, classifier_dir=str(tmp_path / "classifiers"), cache_root=str(tmp_path / "fid"))
    results = callback.run(trainer, RealData(*mnist["train"], 10))
    assert results["classifier"] == weights_hash(classifier) and results["classifier_test_accuracy"] == 0.9
    assert results["IS"] > 4 and results["FID"] < 50  # real images against real images
    assert set(trainer.loggers[0].calls[0][1]) == {
        "image_quality/IS", "image_quality/IS_std", "image_quality/FID", "image_quality/classifier_test_accuracy"
    }


def test_classifier_recipe_per_dataset_from_the_eval_config():
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from dpgen.cli.common import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["data=fashion_mnist"])
    callback = instantiate(cfg.eval.callbacks.image_quality)
    plain = {"epochs": 3, "flip": False, "cosine": False, "channels": (32, 64)}
    assert callback.recipe_for("mnist") == callback.recipe_for("mine") == plain
    assert callback.recipe_for("fashion_mnist") == {"epochs": 15, "flip": True, "cosine": True, "channels": (64, 128)}
    assert ImageQuality(classifier_recipes={"default": {"epochs": 7}}).recipe_for("x") == {**plain, "epochs": 7}
    assert ImageQuality().recipe_for("fashion_mnist") == plain
    with pytest.raises(ValueError, match="unknown settings"):
        ImageQuality(classifier_recipes={"mnist": {"epcohs": 7}})


# The authors' scripts' settings (AI-secure/G-PATE at ad7279a, evaluation/train-classifier-<data>.py: the SGD lr
# at mnist.py line 57 / fmnist.py line 56, batch 512 and 600 epochs at mnist.py line 70 / fmnist.py line 68)
AUTHORS = {"mnist": 1e-3, "fashion_mnist": 2e-3}


@pytest.mark.parametrize("data", sorted(AUTHORS))
def test_the_authors_evaluation_scripts_as_an_eval_config(data):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from dpgen.cli.common import CONF_DIR

    for config in ("config", "evaluate"):  # train.py's and evaluate.py's
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config, overrides=["eval=reference", f"data={data}"])
        callback = instantiate(cfg.eval.callbacks.downstream)
        assert (callback.n_samples, callback.val_fraction, callback.max_epochs, callback.patience) == (
            100000, 0.0, 600, None)
        assert (callback.optimizer, callback.lr, callback.batch_size, callback.cnn) == (
            "sgd", AUTHORS[data], 512, "reference_script")
        assert "image_quality" in cfg.eval.callbacks  # the rest of the default evaluation stays


def test_the_authors_evaluation_samples_g_pate_as_its_authors_do(mnist):
    """eval=reference gives G-PATE's callback the method's batch (the authors' code samples in training mode at
    its batch size); the generator samples so only during the evaluation."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from dpgen.cli.common import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        gpate = compose("config", overrides=["eval=reference", "experiment=gpate/mnist_eps1"])
        dpgan = compose("config", overrides=["eval=reference", "method=dpgan"])
    assert instantiate(gpate.eval.callbacks.downstream).sample_batch_norm == 15
    assert instantiate(dpgan.eval.callbacks.downstream).sample_batch_norm is None
    module = RealData(*mnist["train"], 10)
    module.sample_batch_norm, seen = None, []
    sample = module.sample
    module.sample = lambda n, labels=None: (seen.append(module.sample_batch_norm), sample(n, labels))[1]
    x, y = mnist["train"]
    dm = Data((x[:200], y[:200]), [t[:300] for t in mnist["test"]])
    DownstreamUtility(n_samples=60, max_epochs=1, sample_batch_norm=15).run(fake_trainer(dm), module)
    assert seen == [15] and module.sample_batch_norm is None


def test_the_authors_evaluation_is_refused_where_they_have_no_script():
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from dpgen.cli.common import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["eval=reference", "data=celeba"])
    with pytest.raises(Exception, match="eval=reference"):
        instantiate(cfg.eval.callbacks.downstream)


def test_pate_triplegans_evaluation_as_its_paper_describes_it(mnist):
    """eval=ptg: the settings its paper gives (20,000 samples, 10 epochs, the last epoch's model, five trainings
    averaged, 'OurCNN': three conv + ReLU + max-pool blocks and two dense layers); five repeats on real digits give
    five accuracies from five seeds and their mean."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from dpgen.cli.common import CONF_DIR
    from dpgen.nn.classifier import ptg_cnn

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=["eval=ptg", "data=fashion_mnist"])
    callback = instantiate(cfg.eval.callbacks.downstream)
    assert (callback.n_samples, callback.max_epochs, callback.val_fraction, callback.patience, callback.repeats,
            callback.cnn) == (20000, 10, 0.0, None, 5, "ptg")
    layers = [type(layer).__name__ for layer in ptg_cnn(1, 10, 28)]
    assert layers == ["Conv2d", "ReLU", "MaxPool2d"] * 3 + ["Flatten", "Linear", "ReLU", "Linear"]
    x, y = mnist["train"]
    dm = Data((x[:200], y[:200]), [t[:500] for t in mnist["test"]])
    samples = (x[1000:3000], y[1000:3000])  # the samples stay; each training draws its weights and order anew
    settings = {"max_epochs": 2, "val_fraction": 0.0, "patience": None, "cnn": "ptg"}
    results = DownstreamUtility(**settings, repeats=3).evaluate_synthetic(*samples, dm)
    once = DownstreamUtility(**settings, seed=1).evaluate_synthetic(*samples, dm)
    accuracies = results["repeat_accuracies"]
    assert len(accuracies) == 3 and results["accuracy"] == pytest.approx(np.mean(accuracies))
    assert results["synthetic"]["accuracy"] == results["accuracy"]  # what the comparison reads, the mean too
    assert accuracies[1] == once["accuracy"]  # the second training is the one of seed 1
    assert len(set(accuracies)) > 1 and min(accuracies) > 0.3  # other seeds, and real digits learned
    with pytest.raises(ValueError, match="repeats"):
        DownstreamUtility(repeats=2, selection="private_val")


def test_image_quality_skips_tables():
    dm = SimpleNamespace(test_data=SimpleNamespace(x=torch.zeros(10, 3), y=torch.zeros(10)))
    trainer = fake_trainer(dm)
    x, y, _ = separable_table(10, 10)
    assert ImageQuality().run(trainer, RealData(x, y, 2)) == {} and trainer.loggers[0].calls == []


def test_results_reach_a_real_wandb_logger_offline(tmp_path, monkeypatch):
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_SILENT", "true")
    x, y, dm = separable_table(200, 150)
    logger = WandbLogger(project="dpgen-test", save_dir=str(tmp_path), offline=True)
    trainer = SimpleNamespace(is_global_zero=True, global_step=3, loggers=[logger], datamodule=dm)
    DownstreamUtility(n_samples=100).run(trainer, RealData(x[:150], y[:150], 2))
    logger.experiment.finish()
    run = next((tmp_path / "wandb").glob("offline-run-*"))
    assert any(run.rglob("*.wandb")) and any(run.rglob("downstream/table*.table.json"))


def test_private_val_selections_are_counted_and_added_to_privacy_json_when_training_ends(mnist, tmp_path):
    """Each evaluation with eval.selection=private_val is one Report Noisy Max on the datamodule's split; when training
    ends (after the final evaluation) privacy.json gets one line for all of them, composed in parallel."""
    x, y = mnist["train"]
    dm = Data((x[:200], y[:200]), [t[:300] for t in mnist["test"]])
    dm.private_val_data = SimpleNamespace(x=x[2000:2200], y=y[2000:2200])
    trainer = SimpleNamespace(**vars(fake_trainer(dm)), default_root_dir=str(tmp_path))
    (tmp_path / "privacy.json").write_text(json.dumps({"epsilon": 2.0, "delta": 1e-5}))
    callback = DownstreamUtility(n_samples=60, max_epochs=2, selection="private_val", private_val_epsilon=0.5)
    results = callback.run(trainer, RealData(x[:500], y[:500], 10))  # an evaluation during training
    assert results["selection"] == "private_val" and results["accuracy"] == results["private_val"]["accuracy"]
    assert {results[key]["epoch"] for key in ("synthetic", "private_val", "test")} <= {1, 2}
    charge = {"epsilon": 0.5, "disjoint": True, "split": dm.private_val_split_descriptor, "by": "train.py"}
    assert results["private_val"]["epsilon"] == 0.5 and callback.state_dict() == {"charges": [charge]}
    callback.on_train_end(trainer, RealData(x[:500], y[:500], 10))  # the final evaluation, then the line
    line = json.loads((tmp_path / "privacy.json").read_text())["downstream_selection"]
    assert line["selections"] == 2 and line["epsilon"] == 1.0 and line["release"]["epsilon"] == 2.0
    assert line["release"]["composition"].startswith("parallel") and line["release"]["delta"] == 1e-5
    # a stated budget for the selections: a third at 0.5 would pass 1.2, refused (it is charged before it is made)
    callback.private_val_budget = 1.2
    with pytest.raises(SelectionBudgetError, match="eval.private_val.budget=1.2"):
        callback.charge_selection(dm)
    assert len(callback.charges) == 2


def test_a_selection_the_data_cannot_serve_is_refused_before_training():
    _, _, table = separable_table(40, 30)
    with pytest.raises(ValueError, match="tables have no epochs"):
        DownstreamUtility(selection="test").check_data(table)
    images = Data((torch.zeros(4, 1, 28, 28), torch.zeros(4)), (torch.zeros(4, 1, 28, 28), torch.zeros(4)))
    with pytest.raises(ValueError, match="private validation split"):
        DownstreamUtility(selection="private_val", private_val_epsilon=1.0).check_data(images)
    images.private_val_data = images.test_data
    with pytest.raises(ValueError, match="eval.private_val.epsilon must be given"):
        DownstreamUtility(selection="private_val").check_data(images)
    with pytest.raises(ValueError, match="selection must be one of"):
        DownstreamUtility(selection="hold-out")


class Counting(EvaluationCallback):
    """Records the step of each evaluation."""
    name = "count"

    def __init__(self):
        super().__init__()
        self.steps = []

    def evaluate(self, trainer, pl_module):
        self.steps.append(trainer.global_step)
        return {"evaluations": len(self.steps)}


def test_a_run_resumed_at_its_last_step_is_evaluated(tmp_path):
    """Cut off during its final evaluation and resumed from the checkpoint of its last step, a run trains nothing
    and Lightning calls no on_train_end: the evaluation happens all the same, once."""
    x, y = torch.rand(20, 1, 4, 4), torch.arange(20) % 10
    data = Data((x, y), (x, y))

    def fit(**kw):
        counting = Counting()
        trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, callbacks=[counting], default_root_dir=tmp_path)
        trainer.fit(RealData(x, y, 10), datamodule=data, **kw)
        return trainer, counting

    trainer, first = fit()
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    _, resumed = fit(ckpt_path=tmp_path / "last.ckpt")
    assert first.steps == resumed.steps == [2] and resumed.results == {"evaluations": 1, "step": 2}
