"""PrivacyBudget with a toy LightningModule that records fake releases.

Hand numbers used throughout: one RDP order a = 2 and delta = e^-1, so the classical conversion is
eps = rdp(2) + log(1/delta) / (2 - 1) = rdp + 1. With epsilon = 2.05 a run may spend rdp <= 1.05.
Each step records data_dependent 0.125 and data_independent 0.25 (dyadic: sums are exact).
"""

import json
import math

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpgen.callbacks import PrivacyBudget
from dpgen.callbacks.privacy_budget import BudgetError, rounded_up
from dpgen.callbacks.release import Release
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.cost import StepCost

ORDERS = np.array([2.0])
DELTA = math.exp(-1.0)
BUDGET = 2.05
DD, DI = 0.125, 0.25


class Toy(pl.LightningModule):
    def __init__(self, announce="both", private=True):
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.generator = nn.Linear(2, 2)
        self.ledger = PrivacyLedger(ORDERS) if private else None
        self.announce = announce

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward((self.generator(batch[0]) - 1.0).pow(2).mean())
        opt.step()
        if self.ledger is not None:
            self.ledger.record("toy", {"data_dependent": np.array([DD]), "data_independent": np.array([DI])},
                               count=3, params={"sigma": 1.0})

    def step_cost(self):
        # announce: "both" bounds known in advance (worst case DI), "independent" only (the data-dependent
        # cost is then known after the step), "lower": that and a lower bound DD on any step (as G-PATE, PATE-GAN),
        # or nothing.
        if self.announce == "both":
            return StepCost({"data_dependent": np.array([DI]), "data_independent": np.array([DI])}, ORDERS)
        if self.announce == "lower":
            return StepCost({"data_independent": np.array([DI])}, ORDERS,
                            best={"data_dependent": np.array([DD]), "data_independent": np.array([DI])})
        return StepCost({"data_independent": np.array([DI])}, ORDERS) if self.announce == "independent" else None

    def on_train_batch_start(self, batch, batch_idx):
        if self.trainer.should_stop:
            return -1

    def configure_optimizers(self):
        return torch.optim.SGD(self.generator.parameters(), lr=0.1)

    def train_dataloader(self):
        # identical batches: a resumed run that restarts its epoch sees the same data
        data = torch.full((64, 2), 0.5)
        return DataLoader(TensorDataset(data), batch_size=4)


def trainer(tmp_path, max_steps=1000, callbacks=()):
    return pl.Trainer(max_steps=max_steps, max_epochs=-1, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                      callbacks=list(callbacks))


def fit(tmp_path, module, budget, max_steps=1000, ckpt_path=None):
    t = trainer(tmp_path, max_steps, [budget])
    t.fit(module, ckpt_path=ckpt_path)
    return t


def test_stops_before_a_step_that_could_exceed(tmp_path):
    # Pre-check under data_dependent with worst case 0.25: run while spent + 0.25 <= 1.05. After 7 steps
    # spent = 0.875 and 0.875 + 0.25 = 1.125 > 1.05: stop, the 8th step never runs. eps = 1.875.
    module = Toy()
    t = fit(tmp_path, module, PrivacyBudget(BUDGET, DELTA))
    assert t.global_step == 7
    eps, order = module.ledger.epsilon(DELTA)
    assert eps == pytest.approx(1.875) and order == 2.0
    assert module.ledger.stop["discarded_steps"] == 0
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["epsilon"] == pytest.approx(1.875)
    assert report["governing_bound"] == "data_dependent" and report["conversion"] == "classical"
    assert "DATA-DEPENDENT" in report["note"]
    assert report["mechanisms"]["toy"]["count"] == 21  # 7 steps x 3 queries
    # data-independent total 7 x 0.25 = 1.75 -> eps 2.75, reported though it did not govern
    assert report["total"]["data_independent"]["classical"]["epsilon"] == pytest.approx(2.75)
    assert "stopped before" in report["stop"]["reason"]


def test_data_independent_bound_governs(tmp_path):
    # 4 steps: 4 x 0.25 = 1.0 <= 1.05, a 5th would give 1.25.
    module = Toy()
    t = fit(tmp_path, module, PrivacyBudget(BUDGET, DELTA, bound="data_independent"))
    assert t.global_step == 4
    assert module.ledger.epsilon(DELTA, "data_independent")[0] == pytest.approx(2.0)


@pytest.mark.parametrize("announce", [None, "independent"])
def test_rolls_back_when_cost_known_only_after_the_step(tmp_path, announce):
    # No announced cost under the governing data_dependent bound (none at all, or only a data_independent
    # one, as G-PATE announces): steps run until spent 9 x 0.125 = 1.125 > 1.05; the 9th is rolled back, so the
    # generator equals the one after 8 steps and the ledger says eps = 1 + 1 = 2.
    reference = Toy()
    fit(tmp_path / "ref", reference, PrivacyBudget(100.0, DELTA), max_steps=8)
    module = Toy(announce=announce)
    t = fit(tmp_path, module, PrivacyBudget(BUDGET, DELTA))
    assert t.global_step == 9
    assert module.ledger.epsilon(DELTA)[0] == pytest.approx(2.0)
    assert module.ledger.stop["discarded_steps"] == 1
    for a, b in zip(module.generator.parameters(), reference.generator.parameters()):
        assert torch.equal(a, b)
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["stop"]["discarded_steps"] == 1 and "rolled back" in report["stop"]["reason"]


@pytest.mark.parametrize("announce", ["both", None])
def test_resumed_run_ends_like_an_uninterrupted_one(tmp_path, announce):
    whole = Toy(announce)
    fit(tmp_path / "whole", whole, PrivacyBudget(BUDGET, DELTA))

    first = Toy(announce)
    t = fit(tmp_path / "first", first, PrivacyBudget(BUDGET, DELTA), max_steps=3)
    ckpt = tmp_path / "first" / "interrupted.ckpt"
    t.save_checkpoint(ckpt)
    assert torch.load(ckpt, weights_only=True)["privacy_ledger"]["rdp"]["toy"]["count"] == 9
    resumed = Toy(announce)
    fit(tmp_path / "resumed", resumed, PrivacyBudget(BUDGET, DELTA), ckpt_path=ckpt)

    assert resumed.ledger.epsilon(DELTA) == whole.ledger.epsilon(DELTA)
    assert resumed.ledger.state_dict()["rdp"] == whole.ledger.state_dict()["rdp"]
    for a, b in zip(resumed.generator.parameters(), whole.generator.parameters()):
        assert torch.equal(a, b)


def test_a_run_resumed_after_its_budget_stop_releases_no_further_step(tmp_path):
    # The 9th step is rolled back (test above) and the run's final checkpoint is written after it. Resumed under the
    # same budget the run takes no step (a fresh draw of the 9th is no second chance) and still reports 8 released
    # steps of 9 run; under a budget of 2.3 (rdp <= 1.3) it trains on: steps 10 and 11 spend 1.125 and 1.25, the
    # 12th (1.375) is rolled back, and both rolled-back steps stay counted: 12 run, 10 released.
    first = Toy(announce=None)
    t = fit(tmp_path / "first", first, PrivacyBudget(BUDGET, DELTA))
    ckpt = tmp_path / "first" / "stopped.ckpt"
    t.save_checkpoint(ckpt)
    same = Toy(announce=None)
    t = fit(tmp_path / "same", same, PrivacyBudget(BUDGET, DELTA), ckpt_path=ckpt)
    assert t.global_step == 9 and same.ledger.stop["discarded_steps"] == 1
    assert same.ledger.stop == first.ledger.stop and "rolled back" in same.ledger.stop["reason"]
    assert same.ledger.state_dict()["rdp"] == first.ledger.state_dict()["rdp"]
    for a, b in zip(same.generator.parameters(), first.generator.parameters()):
        assert torch.equal(a, b)
    more = Toy(announce=None)
    t = fit(tmp_path / "more", more, PrivacyBudget(2.3, DELTA), ckpt_path=ckpt)
    assert t.global_step == 12 and more.ledger.stop["discarded_steps"] == 2
    assert more.ledger.epsilon(DELTA)[0] == pytest.approx(10 * DD + 1)


@pytest.mark.parametrize("announce, budget, needed", [("both", 1.2, "1.25"), ("lower", 1.1, "1.13")])
def test_budget_too_small_for_one_step(tmp_path, announce, budget, needed):
    # "both": the worst case is checked before each step, and one costs 0.25 + 1 = 1.25 > 1.2. "lower": the
    # data-dependent cost is known only after a step, but none costs less than 0.125 + 1 = 1.125 > 1.1: refused
    # before any step runs (a run would otherwise roll its first step back), with the least budget, rounded up
    module = Toy(announce)
    with pytest.raises(BudgetError, match=f"too small for one step.*privacy.epsilon={needed} or more.*dpgen.cli.plan"):
        fit(tmp_path, module, PrivacyBudget(budget, DELTA))
    assert module.ledger.empty and not (tmp_path / "privacy.json").exists()


def test_a_run_whose_every_step_is_rolled_back_fails_and_writes_nothing(tmp_path):
    # no cost announced, so no check before the step: the first step costs 0.125 + 1 = 1.125 > 1.1 and is rolled
    # back; nothing is left to release, so training ends with BudgetError before privacy.json or the generator
    module = Toy(announce=None)
    released = Release(lambda m: (tmp_path / "generator.pt").write_text("released"))
    t = trainer(tmp_path, callbacks=[PrivacyBudget(1.1, DELTA), released])
    with pytest.raises(BudgetError, match=r"no training step was released \(budget: .*rolled back"):
        t.fit(module)
    assert t.global_step == 1 and module.ledger.stop["discarded_steps"] == 1 and module.ledger.empty
    assert not (tmp_path / "privacy.json").exists() and not (tmp_path / "generator.pt").exists()


def test_budgets_are_rounded_up_for_the_user():
    assert (rounded_up(1.125), rounded_up(0.036741), rounded_up(12.0), rounded_up(1e-4)) == (1.13, 0.0368, 12.0, 1e-4)


@pytest.mark.parametrize("epsilon, delta", [(0.0, 1e-5), (-1.0, 1e-5), (1.0, 0.0), (1.0, 1.0), (1.0, 2.0)])
def test_invalid_budget(epsilon, delta):
    with pytest.raises(ValueError):
        PrivacyBudget(epsilon, delta)


def test_pld_needs_a_method_whose_releases_are_all_gaussian(tmp_path):
    with pytest.raises(ValueError, match="conversion=pld"):
        fit(tmp_path, Toy(), PrivacyBudget(BUDGET, DELTA, conversion="pld"))


def test_min_steps_refused(tmp_path):
    t = pl.Trainer(max_steps=5, min_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                   callbacks=[PrivacyBudget(BUDGET, DELTA)])
    with pytest.raises(ValueError, match="min_steps"):
        t.fit(Toy())


def test_non_private_module_is_left_alone(tmp_path):
    module = Toy(private=False)
    t = fit(tmp_path, module, PrivacyBudget(BUDGET, DELTA), max_steps=20)
    assert t.global_step == 20
    assert not (tmp_path / "privacy.json").exists()


def test_checkpoints_never_hold_an_over_budget_generator(tmp_path):
    # ModelCheckpoint saves after every step; Lightning runs it after PrivacyBudget, so the last checkpoint
    # is the rolled-back state: 8 steps, eps 2, not the over-budget 9th step.
    module = Toy(announce=None)
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1)
    t = pl.Trainer(max_steps=1000, max_epochs=-1, accelerator="cpu", logger=False, enable_progress_bar=False,
                   enable_model_summary=False, default_root_dir=tmp_path, callbacks=[saver, PrivacyBudget(BUDGET, DELTA)])
    t.fit(module)
    for path in (tmp_path / "ckpt").glob("*.ckpt"):
        checkpoint = torch.load(path, weights_only=True)
        ledger = PrivacyLedger(ORDERS)
        ledger.load_state_dict(checkpoint["privacy_ledger"])
        assert ledger.epsilon(DELTA)[0] <= BUDGET
    last = torch.load(max((tmp_path / "ckpt").glob("*.ckpt"), key=lambda p: p.stat().st_mtime), weights_only=True)
    weights = {k.removeprefix("generator."): v for k, v in last["state_dict"].items()}
    for k, v in module.generator.state_dict().items():
        assert torch.equal(weights[k], v)


class ToyWithStudent(Toy):
    """A generator and a student with stateful optimizers (what a step's releases reach), and private teachers
    (their own data only, so a rolled-back step may leave them as they are)."""
    private_modules = ("teachers",)

    def __init__(self):
        super().__init__(announce=None)  # cost known only after the step: the 9th step is rolled back
        self.student, self.teachers = nn.Linear(2, 1), nn.Linear(2, 2)

    def training_step(self, batch, batch_idx):
        with torch.no_grad():
            self.teachers.weight.add_(1.0)
        for opt, net in zip(self.optimizers(), (self.generator, self.student)):
            opt.zero_grad()
            self.manual_backward((net(batch[0]) - 1.0).pow(2).mean())
            opt.step()
        self.ledger.record("toy", {"data_dependent": np.array([DD]), "data_independent": np.array([DI])},
                           count=3, params={"sigma": 1.0})

    def configure_optimizers(self):
        return (torch.optim.SGD(self.generator.parameters(), lr=0.1, momentum=0.9),
                torch.optim.Adam(self.student.parameters(), lr=0.1))


def optimizer_tensors(optimizers):
    return [v for opt in optimizers for state in opt.state_dict()["state"].values() for v in state.values()]


def test_a_rolled_back_step_leaves_only_the_private_modules_changed(tmp_path):
    reference = ToyWithStudent()
    ref_trainer = fit(tmp_path / "ref", reference, PrivacyBudget(100.0, DELTA), max_steps=16)  # 2 optimizer steps each
    module = ToyWithStudent()
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_last=True)
    t = pl.Trainer(max_steps=1000, max_epochs=-1, accelerator="cpu", logger=False, enable_progress_bar=False,
                   enable_model_summary=False, default_root_dir=tmp_path, callbacks=[saver, PrivacyBudget(BUDGET, DELTA)])
    t.fit(module)
    assert t.global_step == 18 and module.ledger.stop["discarded_steps"] == 1
    for name in ("generator", "student"):
        for a, b in zip(getattr(module, name).parameters(), getattr(reference, name).parameters()):
            assert torch.equal(a, b), name
    after, before = optimizer_tensors(t.optimizers), optimizer_tensors(ref_trainer.optimizers)
    assert len(after) == len(before) == 2 + 2 * 3  # 2 momenta (generator); step, exp_avg, exp_avg_sq x 2 (student)
    assert all(torch.equal(a, b) for a, b in zip(after, before))
    assert torch.equal(module.teachers.weight, reference.teachers.weight + 1.0)  # private: the 9th update stays
    # the checkpoint written after the rolled-back step holds the in-budget optimizer state too
    last = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    saved = [v for opt in last["optimizer_states"] for state in opt["state"].values() for v in state.values()]
    assert all(torch.equal(a, b) for a, b in zip(saved, before))
