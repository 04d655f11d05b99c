"""GS-WGAN (dpgen.methods.gswgan): the two bounds, the sanitizer, the vectorized critics, a tiny run."""
import copy
import json
import warnings

import dp_accounting
import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from dpgen.aggregation.gradient_sanitizer import SanitizerParams, sanitize
from dpgen.callbacks.privacy_budget import BudgetError, PrivacyBudget
from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.methods import gswgan as gswgan_module
from dpgen.methods.gswgan import GSWGAN, KEPT_CAVEAT, MECHANISM, PARTIAL, WARM_START
from dpgen.nn.critic import CriticEnsemble, ProjectionCritic
from dpgen.privacy.gswgan import GSWGAN_ORDERS, rdp_gswgan_step, sound_pld_event, sound_pld_events
from dpgen.privacy.pld import epsilon_pld
from dpgen.privacy.rdp import eps_from_rdp

warnings.filterwarnings("ignore")


def wor_accountant(n, sigma, count):
    acc = dp_accounting.rdp.RdpAccountant(list(GSWGAN_ORDERS), dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(n, 1, dp_accounting.GaussianDpEvent(sigma)), count)
    return acc


def test_bounds_count_events_as_defined():
    step = rdp_gswgan_step(1000, 32, 1.07, GSWGAN_ORDERS)
    # as published: 32 events at sigma 1.07 per step; sound: 1 event at 1.07 / sqrt(32) = 0.189
    assert np.allclose(step["as_published"], wor_accountant(1000, 1.07, 32).rdp)
    assert np.allclose(step["sound"], wor_accountant(1000, 1.07 / np.sqrt(32), 1).rdp)


def test_worked_numbers_of_the_docs():
    step = rdp_gswgan_step(1000, 32, 1.07, GSWGAN_ORDERS)
    eps = {b: {t: eps_from_rdp(step[b] * t, GSWGAN_ORDERS, 1e-5)[0] for t in (1, 20000)} for b in step}
    # the paper's setting (20000 steps) gives its eps ~ 10 as published; one step already costs ~26 when sound
    assert eps["as_published"][20000] == pytest.approx(9.99, abs=0.01)
    assert eps["as_published"][1] == pytest.approx(0.78, abs=0.01)
    assert eps["sound"][1] == pytest.approx(26.34, abs=0.01)
    # sigma = 1.07 sqrt(32) per sample makes the sound per-step event the published one's single event
    fixed = rdp_gswgan_step(1000, 32, 1.07 * np.sqrt(32), GSWGAN_ORDERS)["sound"]
    assert np.allclose(fixed, step["as_published"] / 32)
    assert eps_from_rdp(fixed * 20000, GSWGAN_ORDERS, 1e-5)[0] == pytest.approx(1.57, abs=0.01)


def test_per_sample_draws_make_the_papers_count_the_sound_one():
    """One critic drawn for each sample, independently: each sanitized gradient is a subsampled Gaussian of its
    own at sigma, B per step, under both bounds (docs/PRIVACY.md, GS-WGAN); worked numbers of the docs."""
    step = rdp_gswgan_step(1000, 32, 1.07, GSWGAN_ORDERS, draw="per_sample")
    assert np.allclose(step["sound"], wor_accountant(1000, 1.07, 32).rdp)
    assert np.array_equal(step["sound"], step["as_published"])
    assert np.array_equal(step["as_published"], rdp_gswgan_step(1000, 32, 1.07, GSWGAN_ORDERS)["as_published"])
    event, count = sound_pld_events(1000, 32, 1.07, "per_sample")
    assert count == 32 and event == {"kind": "replace_poisson_gaussian", "sample_rate": 1e-3,
                                     "noise_multiplier": 1.07}
    assert sound_pld_events(1000, 32, 1.07) == (sound_pld_event(1000, 32, 1.07), 1)
    # the paper's 20,000 steps at 1.07 are a sound eps = 10 run with per-sample draws (7.75 by the PLD)
    assert epsilon_pld([(event, 32 * 20000)], 1e-5) == pytest.approx(7.75, abs=0.01)
    assert epsilon_pld([(sound_pld_event(1000, 32, 1.07), 20000)], 1e-5) > 300  # one draw per step
    with pytest.raises(ValueError, match="draw must be one of"):
        SanitizerParams(n_discriminators=10, draw="per_batch")
    with pytest.raises(ValueError, match="batch_size"):
        sound_pld_events(1000, 0, 1.07, "per_sample")


def test_sanitizer_clips_each_row_and_adds_noise_of_std_2_c_sigma():
    p = SanitizerParams(n_discriminators=10, clip=1.0, noise_multiplier=1e-9)
    grads = torch.tensor([[3.0, 4.0], [0.3, 0.4]])  # norms 5 and 0.5
    out, rdp = sanitize(grads, p, GSWGAN_ORDERS)
    assert torch.allclose(out, torch.tensor([[0.6, 0.8], [0.3, 0.4]]), atol=1e-6)
    assert set(rdp) == {"as_published", "sound"}
    p = SanitizerParams(n_discriminators=10, clip=0.5, noise_multiplier=2.0)
    out, _ = sanitize(torch.zeros(400, 250), p, GSWGAN_ORDERS, torch.Generator().manual_seed(0))
    assert out.std().item() == pytest.approx(2 * 0.5 * 2.0, rel=0.02)  # 100000 draws: std error 0.2%


def test_ensemble_step_equals_a_plain_critic_with_adam():
    torch.manual_seed(0)
    ens = CriticEnsemble(3, (1, 8, 8), 2, model_dim=4, chunk_size=2, lr=1e-2).double()  # float64: compare exactly
    real, fake = torch.rand(3, 6, 1, 8, 8, dtype=torch.float64), torch.rand(3, 6, 1, 8, 8, dtype=torch.float64)
    y = torch.randint(0, 2, (3, 6))
    critic = ProjectionCritic((1, 8, 8), 2, model_dim=4).double()
    critic.load_state_dict({n: getattr(ens.params, n.replace(".", "_"))[1].double() for n in ens.names})
    opt = torch.optim.Adam(critic.parameters(), lr=1e-2, betas=(0.5, 0.9))
    for step in range(2):
        alpha = torch.rand((3, 6, 1, 1, 1), generator=torch.Generator().manual_seed(step), dtype=torch.float64)
        ens.train_step(0, 3, real, y, fake, torch.Generator().manual_seed(step))
        x_r, x_f, a = real[1], fake[1], alpha[1]
        mixed = (a * x_r + (1 - a) * x_f).requires_grad_(True)
        (slopes,) = torch.autograd.grad(critic(mixed, y[1]).sum(), mixed, create_graph=True)
        d_real = critic(x_r, y[1])
        loss = (critic(x_f, y[1]).mean() - d_real.mean() + 10 * (slopes.flatten(1).norm(dim=1) - 1).pow(2).mean()
                + 1e-3 * d_real.pow(2).mean())
        opt.zero_grad()
        loss.backward()
        opt.step()
    for name, p in critic.named_parameters():
        assert torch.allclose(getattr(ens.params, name.replace(".", "_"))[1], p, atol=1e-10), name
    assert ens.steps.tolist() == [2, 2, 2]


def test_each_sample_scored_by_its_own_critic_equals_that_critic_alone():
    torch.manual_seed(0)
    ens = CriticEnsemble(5, (1, 8, 8), 3, model_dim=4, chunk_size=2).double()
    x, y = torch.rand(4, 1, 8, 8, dtype=torch.float64, requires_grad=True), torch.tensor([2, 0, 1, 2])
    drawn = torch.tensor([3, 0, 3, 4])
    score = ens.score_each(ens.copies(drawn)[0], x, y)
    (grads,) = torch.autograd.grad(score.sum(), x)
    for i, j in enumerate(drawn.tolist()):
        alone = ens.score(j, x[i:i + 1], y[i:i + 1])
        (grad_alone,) = torch.autograd.grad(alone.sum(), x)
        assert torch.allclose(score[i], alone[0], rtol=1e-12, atol=1e-12)
        assert torch.allclose(grads[i], grad_alone[i], rtol=1e-12, atol=1e-12)
        assert torch.count_nonzero(grad_alone[torch.arange(4) != i]) == 0


def test_critic_training_lowers_its_loss():
    torch.manual_seed(0)
    ens = CriticEnsemble(2, (1, 8, 8), 2, model_dim=4, lr=1e-2)
    real, fake = torch.full((2, 8, 1, 8, 8), 0.8), torch.full((2, 8, 1, 8, 8), 0.2)
    y = torch.zeros(2, 8, dtype=torch.long)
    losses = [ens.train_step(0, 2, real, y, fake) for _ in range(20)]
    assert (losses[-1] < losses[0] - 0.5).all()


def test_warm_start_stopped_and_resumed_equals_one_uninterrupted():
    def sample_real(ens):  # a deterministic stand-in for the shards: a function of the critics' step counts
        def draw(s, e):
            g = torch.Generator().manual_seed(int(ens.steps[s]) * 10 + s)
            return torch.rand(e - s, 4, 1, 8, 8, generator=g), torch.randint(0, 2, (e - s, 4), generator=g)
        return draw

    args = {"steps": 3, "critic_steps": 2, "z_dim": 4, "generator_hidden": (8,), "seed": 5}
    whole = CriticEnsemble(4, (1, 8, 8), 2, model_dim=4, chunk_size=2, lr=1e-2)
    whole.pretrain(sample_real(whole), **args)
    saved = []

    def save_then_stop(progress):  # the 4th save: chunk 2-3 after its first step
        saved.append(copy.deepcopy({"critics": stopped.state_dict(), "progress": progress}))
        if len(saved) == 4:
            raise KeyboardInterrupt

    stopped = CriticEnsemble(4, (1, 8, 8), 2, model_dim=4, chunk_size=2, lr=1e-2)
    with pytest.raises(KeyboardInterrupt):
        stopped.pretrain(sample_real(stopped), save=save_then_stop, save_every_s=0, **args)
    assert [(p["progress"]["chunk"], p["progress"]["step"]) for p in saved] == [(0, 1), (0, 2), (0, 3), (2, 1)]
    resumed = CriticEnsemble(4, (1, 8, 8), 2, model_dim=4, chunk_size=2, lr=1e-2, seed=9)  # other init: overwritten
    resumed.load_state_dict(saved[-1]["critics"])
    resumed.pretrain(sample_real(resumed), resume=saved[-1]["progress"], **args)
    assert torch.equal(resumed.steps, torch.full((4,), 6))
    for name, value in whole.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name


class Images(DPGenDataModule):
    name, kind, shape, num_classes, class_names = "img", "image", (1, 8, 8), 2, ["a", "b"]

    def load(self):
        g = torch.Generator().manual_seed(0)
        y = torch.arange(200) % 2
        x = (0.2 + 0.6 * y.view(-1, 1, 1, 1) + 0.05 * torch.randn(200, 1, 8, 8, generator=g)).clamp(0, 1)
        return TensorData(x.float(), y), TensorData(x[:20].float(), y[:20])


def tiny_gswgan(**kw):
    args = dict(batch_size=8, n_discriminators=4, critic_steps=2, lr=1e-3, sanitizer={"noise_multiplier": 1.0},
                critics={"model_dim": 4, "chunk_size": 4},
                pretrain={"steps": 3, "critic_steps": 2, "z_dim": 4, "generator_hidden": [16]},
                generator={"fc_dim": 16, "start_channels": 4, "deconv_channels": []})
    args.update(kw)
    return GSWGAN((1, 8, 8), 2, "image", **args)


def fit(model, steps, callbacks=(), *, root):  # root: the run folder (pretrained_critics.pt goes there)
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=list(callbacks), default_root_dir=root)
    trainer.fit(model, datamodule=Images(batch_size=8))
    return trainer


@pytest.mark.parametrize("bound", ["sound", "as_published", "data_dependent", "data_independent"])
def test_budget_stops_before_exceeding_under_the_chosen_bound(bound, tmp_path):
    model = tiny_gswgan(sanitizer={"noise_multiplier": 3.0})
    governing = {"as_published": "as_published"}.get(bound, "sound")  # GS-WGAN has no data-dependent bound
    step = rdp_gswgan_step(4, 8, 3.0, GSWGAN_ORDERS)[governing]
    fitting = max(k for k in range(1, 50) if eps_from_rdp(step * k, GSWGAN_ORDERS, 1e-5)[0] <= 5.0)
    assert fitting == {"sound": 2, "as_published": 3}[governing]  # eps: 3.51, 4.59, 5.45 / 2.18, 3.44, 4.41, 5.20
    trainer = fit(model, 50, [PrivacyBudget(5.0, 1e-5, bound=bound)], root=tmp_path)
    assert trainer.global_step == fitting
    assert model.ledger.summary(1e-5)["mechanisms"][MECHANISM["per_step"]]["count"] == fitting
    assert model.ledger.stop["discarded_steps"] == 0
    # privacy.json names the bound that governed, not the config's name for it, and lists GS-WGAN's two only
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["governing_bound"] == governing and sorted(report["bounds"]) == ["as_published", "sound"]
    assert report.get("requested_bound", bound) == bound and "DATA-DEPENDENT" not in json.dumps(report)
    assert report["epsilon"] == report["total"][governing]["classical"]["epsilon"]
    assert f"under {governing}" in report["stop"]["reason"]


def test_tiny_run_pretrains_every_critic_and_releases_the_ema(tmp_path, caplog):
    model = tiny_gswgan()
    with caplog.at_level("INFO", logger="dpgen.nn.critic"):
        fit(model, 4, root=tmp_path)
    assert bool(model.pretrained) and (model.critics.steps >= 3 * 2).all()  # 3 pretraining steps x 2 critic steps
    assert "step 3 of 3" in caplog.text  # the warm-up reports its progress to the log (a file under nohup)
    # the default, scheduled: each step's critic (step mod 4) keeps its 2 updates, the drawn critic's are undone
    assert model.critics.steps.sum().item() == 4 * 6 + 4 * 2
    # the EMA (released) differs from the trained generator once decay > 0, and sample() uses it
    assert any(not torch.equal(a, b) for a, b in zip(model.net_ema.parameters(), model.net_g.parameters()))
    assert model.generator is model.net_ema
    x, y = model.sample(6)
    assert x.shape == (6, 1, 8, 8) and ((0 <= x) & (x <= 1)).all()


@pytest.mark.parametrize("ema_decay", [0.999, 0.0])
def test_a_checkpoint_of_the_old_layout_loads_into_the_base_average(ema_decay, tmp_path):
    # before GS-WGAN used the base class's average, `net_g` held the average and `net_train` the trained generator
    model = tiny_gswgan(ema_decay=ema_decay)
    fit(model, 2, root=tmp_path)
    renamed = {"net_g.": "net_train.", "net_ema.": "net_g."}
    old = {next((renamed[p] + k[len(p):] for p in renamed if k.startswith(p)), k): v.clone()
           for k, v in model.state_dict().items()}
    if not ema_decay:  # the old layout always had both; with decay 0 the average was a copy of the trained net
        old |= {"net_g." + k: v.clone() for k, v in model.net_g.state_dict().items()}
    loaded = tiny_gswgan(ema_decay=ema_decay)
    checkpoint = {"state_dict": old}
    loaded.on_load_checkpoint(checkpoint)
    loaded.load_state_dict(checkpoint["state_dict"])  # strict: every key placed, none left over
    for mine, theirs in [(loaded.net_g, model.net_g), (loaded.generator, model.generator)]:
        assert all(torch.equal(a, b) for a, b in zip(mine.state_dict().values(), theirs.state_dict().values()))
    assert (loaded.net_ema is None) == (not ema_decay)


def test_pretrained_critics_are_saved_and_reused_only_on_the_same_shards(tmp_path, monkeypatch):
    first = tiny_gswgan()
    fit(first, 1, root=tmp_path / "a")
    saved = tmp_path / "a" / "pretrained_critics.pt"
    assert saved.is_file()
    again = tiny_gswgan(pretrained_critics=str(saved))
    monkeypatch.setattr(again.critics, "pretrain", lambda *a, **k: pytest.fail("pretrained again"))
    fit(again, 1, root=tmp_path / "b")
    assert bool(again.pretrained) and (again.critics.steps >= 3 * 2).all()
    with pytest.raises(ValueError, match="other shards"):
        fit(tiny_gswgan(pretrained_critics=str(saved), seed=1), 1, root=tmp_path / "c")
    with pytest.raises(ValueError, match="do not fit"):
        fit(tiny_gswgan(pretrained_critics=str(saved), critics={"model_dim": 8, "chunk_size": 4}), 1,
            root=tmp_path / "d")
    with pytest.raises(FileNotFoundError):
        fit(tiny_gswgan(pretrained_critics=str(tmp_path / "none.pt")), 1, root=tmp_path / "e")


def test_a_warm_start_cut_off_goes_on_where_it_stopped_in_the_same_folder(tmp_path, monkeypatch):
    real_save = gswgan_module.save_file

    def save_then_die(state, path):  # the process is killed after the warm start's second of 3 steps
        real_save(state, path)
        if path.name == PARTIAL and state["progress"]["step"] == 2:
            raise RuntimeError("killed")

    monkeypatch.setattr(gswgan_module, "save_file", save_then_die)
    pretrain = {"steps": 3, "critic_steps": 2, "z_dim": 4, "generator_hidden": [16], "save_every_s": 0}
    with pytest.raises(RuntimeError, match="killed"):
        fit(tiny_gswgan(pretrain=pretrain), 1, root=tmp_path)
    assert (tmp_path / PARTIAL).is_file() and not (tmp_path / WARM_START).exists()
    monkeypatch.setattr(gswgan_module, "save_file", real_save)
    with pytest.raises(ValueError, match="other settings"):  # 4 steps would not be the warm start that was begun
        fit(tiny_gswgan(pretrain={**pretrain, "steps": 4}), 1, root=tmp_path)
    model, drawn = tiny_gswgan(pretrain=pretrain), []
    shard_batch_of = model.shard_batch_of
    model.shard_batch_of = lambda critics: drawn.append(len(critics)) or shard_batch_of(critics)
    fit(model, 1, root=tmp_path)
    # the third warm-up step only (2 critic steps of the 4 critics), then 1 main step: 2 steps of critic 0 (the
    # step's scheduled critic, kept) and 2 of a copy of the drawn critic (thrown away)
    assert drawn == [4, 4, 1, 1, 1, 1]
    assert torch.equal(model.critics.steps, torch.tensor([8, 6, 6, 6]))
    assert (tmp_path / WARM_START).is_file() and not (tmp_path / PARTIAL).exists()
    # cut off after the warm start, before a checkpoint: a run in the same folder takes the saved critics
    again = tiny_gswgan(pretrain=pretrain)
    monkeypatch.setattr(again.critics, "pretrain", lambda *a, **k: pytest.fail("pretrained again"))
    fit(again, 1, root=tmp_path)
    assert (again.critics.steps >= 6).all()


def test_generator_learns_from_the_sanitized_gradient_only(monkeypatch, tmp_path):
    seen, captured = {}, []

    def fake_sanitize(grads, p, orders, generator=None):
        seen["grads"] = grads
        return torch.ones_like(grads), {"as_published": np.zeros(len(orders)), "sound": np.zeros(len(orders))}

    monkeypatch.setattr("dpgen.methods.gswgan.sanitize", fake_sanitize)
    model = tiny_gswgan()
    # the only backward pass through the generator is the generator step (critic fakes are made under no_grad)
    model.net_g.register_full_backward_hook(lambda mod, gin, gout: captured.append(gout[0].clone()))
    fit(model, 1, root=tmp_path)
    assert seen["grads"].shape == (8, 1, 8, 8) and len(captured) == 1
    # what reaches the generator's output is the sanitizer's output / batch size, nothing else
    assert torch.allclose(captured[0], torch.full_like(captured[0], 1 / 8))


class OneLabelFlipped(Images):
    def load(self):
        train, test = super().load()
        y = train.y.clone()
        y[0] = 1 - y[0]  # a neighbouring data set: one record's label changed
        return TensorData(train.x, y), test


def on_neighbours(monkeypatch, tmp_path, steps: int, read, **kw) -> list:
    """`read(model)` after `steps` steps on Images and on OneLabelFlipped, secret noise fixed and no warm start;
    batches of 200, so every critic step sees its critic's whole shard and the changed record is in it."""
    monkeypatch.setattr("dpgen.methods.gswgan.secret_generator", lambda: torch.Generator().manual_seed(0))
    monkeypatch.setattr(CriticEnsemble, "pretrain", lambda self, *a, **k: None)
    out = []
    for datamodule in (Images(batch_size=8), OneLabelFlipped(batch_size=8)):
        torch.manual_seed(0)
        model = tiny_gswgan(batch_size=200, generator={"fc_dim": 16, "start_channels": 4, "deconv_channels": [4]},
                            **kw)
        assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.net_g.modules())
        # CPU: bitwise equality needs deterministic kernels (GPU convolutions and reductions may differ run to run)
        trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu")
        trainer.fit(model, datamodule=datamodule)
        out.append(read(model))
    return out


@pytest.mark.parametrize("critic_fakes", ["own", "pool"])
def test_private_labels_do_not_reach_the_released_generator_through_batch_norm(critic_fakes, monkeypatch, tmp_path):
    """The critic steps draw fakes with the chosen shard's private labels; the released generator (its weights
    and its BatchNorm running statistics, which sampling in eval mode uses) must not depend on them. Critics
    frozen (one critic, so the changed record is in every critic step), so the sanitized gradients are equal on
    both data sets."""
    monkeypatch.setattr(CriticEnsemble, "adam_step", lambda self, *a, **k: torch.zeros(1))  # every critic step
    released = on_neighbours(monkeypatch, tmp_path, 3, lambda model: model.generator.state_dict(), n_discriminators=1,
                             critic_fakes=critic_fakes)
    for key, value in released[0].items():
        assert torch.equal(value, released[1][key]), key


@pytest.mark.parametrize("updates,m,k", [("discarded", 1, 2), ("scheduled", 1, 2), ("scheduled", 2, 1), ("kept", 1, 2)])
def test_the_drawn_critic_is_trained_before_its_gradient_and_then_reset_or_kept(updates, m, k, tmp_path):
    """discarded: a copy of the drawn critic takes its 2 steps and gives every sample's gradient, and every critic
    is back at its warm start after each step, so no state depends on earlier draws (the accounting's premise);
    scheduled: only the m critics (t m .. t m + m - 1) mod N_D of step t keep updates, whatever was drawn, k steps
    each; kept: the drawn critic itself takes the 2 steps and carries them, and privacy.json says the bound is
    then the paper's argument, not a proof."""
    fit(tiny_gswgan(), 1, root=tmp_path / "warm")
    warm = torch.load(tmp_path / "warm" / WARM_START)["critics"]
    schedule = {"scheduled_critics": m, "scheduled_steps": k} if updates == "scheduled" else {}
    model, drawn = tiny_gswgan(critic_updates=updates, pretrained_critics=str(tmp_path / "warm" / WARM_START),
                               **schedule), []
    score, score_copies, trained_copies = model.critics.score, model.score_copies, model.trained_copies
    adam_step = model.critics.adam_step

    def scheduled(t: int, i: int) -> bool:  # critic i is in step t's block: critics t m .. t m + m - 1 mod 4
        return updates == "scheduled" and (i - t * m) % 4 < m

    def kept(i: int, steps: int) -> int:  # the critic steps critic i keeps from the first `steps` steps
        if updates == "scheduled":
            return k * sum(scheduled(t, i) for t in range(steps))
        return 2 * (updates == "kept") * drawn[:steps].count(i)

    def at_draw(t: int, i: int) -> int:  # critic i's steps when step t draws (its scheduled update comes first)
        return warm["steps"][i] + kept(i, t) + k * scheduled(t, i)

    def score_spy(i, x, y):  # kept: the gradient comes from critic i itself after this step's 2 critic steps
        t = len(drawn)
        drawn.append(i)
        assert model.critics.steps[i] == at_draw(t, i) + 2
        return score(i, x, y)

    def copies_spy(critics):  # discarded, scheduled: from a copy of the one drawn critic after its 2 steps
        t, (i,) = len(drawn), critics.tolist()
        drawn.append(i)
        taken = []
        model.critics.adam_step = lambda *args: taken.append(len(args[3])) or adam_step(*args)  # args[3]: the copies' step counts
        theta, loss = trained_copies(critics)
        model.critics.adam_step = adam_step
        assert taken == [1, 1] and model.critics.steps[i] == at_draw(t, i)  # the ensemble's critic i is untouched
        return theta, loss

    def score_copies_spy(theta, slot, x, y):  # one draw for all: every sample is scored by the one copy
        assert all(len(v) == 1 for v in theta.values()) and slot.tolist() == [0] * len(x)
        return score_copies(theta, slot, x, y)

    model.critics.score, model.trained_copies, model.score_copies = score_spy, copies_spy, score_copies_spy
    fit(model, 5, [PrivacyBudget(1e6, 1e-5)], root=tmp_path / "run")
    assert len(drawn) == 5
    after = model.critics.state_dict()
    changed = {i for i in range(4) if any(not torch.equal(after[k][i], warm[k][i]) for k in warm)}
    assert changed == {"discarded": set(), "scheduled": {0, 1, 2, 3}, "kept": set(drawn)}[updates]
    assert [after["steps"][i] - warm["steps"][i] for i in range(4)] == [kept(i, 5) for i in range(4)]
    report = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert report.get("caveats") == ([KEPT_CAVEAT] if updates == "kept" else None)
    assert report["mechanisms"][MECHANISM["per_step"]]["params"][0]["critic_updates"] == updates
    assert report["mechanisms"][MECHANISM["per_step"]]["params"][0]["scheduled_critics"] == m
    assert report["mechanisms"][MECHANISM["per_step"]]["params"][0]["scheduled_steps"] == k
    with pytest.raises(ValueError, match="critic_updates"):
        tiny_gswgan(critic_updates="reset")
    with pytest.raises(ValueError, match="need critic_updates=scheduled"):
        tiny_gswgan(critic_updates="discarded", scheduled_critics=2)
    with pytest.raises(ValueError, match="need critic_updates=scheduled"):
        tiny_gswgan(critic_updates="kept", scheduled_steps=1)
    with pytest.raises(ValueError, match="must divide"):
        tiny_gswgan(scheduled_critics=3)
    with pytest.raises(ValueError, match="scheduled_steps"):
        tiny_gswgan(scheduled_steps=0)


@pytest.mark.parametrize("critic_fakes", ["own", "pool"])
def test_a_scheduled_block_of_critics_sees_no_other_shard(critic_fakes, monkeypatch, tmp_path):
    """scheduled_critics = N_D: every critic trains in one vectorized block each step; changing one record (its
    label: labels are not hashed, so the shards stay) changes its own critic's state only, also through the
    generator's BatchNorm, which normalises each critic's fakes as a batch of their own. One step: the block
    trains against the initial generator (a later one has seen a sanitized gradient). With critic_fakes=pool the
    critics' fakes come from one pool, which must not depend on any critic's labels."""
    models = []
    states = on_neighbours(monkeypatch, tmp_path, 1, lambda model: models.append(model) or model.critics.state_dict(),
                           scheduled_critics=4, critic_fakes=critic_fakes)
    owner = int((models[0].shards == 0).any(1).nonzero())  # the changed record's critic
    changed = {i for i in range(4) if any(not torch.equal(states[0][k][i], states[1][k][i]) for k in states[0])}
    assert changed == {owner}


class LabelPainter(torch.nn.Module):
    """A generator stub: each sample is an image filled with its label plus a counter of the samples made so far,
    so a fake tells which label and which generator call made it; records every call's labels."""

    def __init__(self):
        super().__init__()
        self.calls, self.made = [], 0

    def forward(self, z, y):
        self.calls.append(y.clone())
        serial = self.made + torch.arange(len(y), dtype=torch.float32)
        self.made += len(y)
        return (y.float() + serial / 1e4).view(-1, 1, 1, 1).expand(-1, 1, 8, 8).clone()


@pytest.mark.parametrize("critic_fakes", ["own", "pool"])
def test_critic_fakes_carry_their_records_labels_from_own_batches_or_one_public_pool(critic_fakes):
    """own: one generator batch per critic, with its records' labels; pool: one generator batch of batch_size
    samples of every class (labels public: the same whatever the records), each record's fake one of its label's."""
    model = tiny_gswgan(critic_fakes=critic_fakes)
    model.net_g, model.rng = LabelPainter(), torch.Generator().manual_seed(0)  # the draws from the pool fixed
    real_y = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 1], [1, 1, 1, 0, 1, 1, 1, 1], [0, 1, 0, 1, 0, 1, 0, 1]])
    fakes = model.fakes_for(real_y)
    assert fakes.shape == (3, 8, 1, 8, 8)
    assert torch.equal(fakes[..., 0, 0, 0].floor().long(), real_y)  # each fake carries its record's label
    if critic_fakes == "own":
        assert [c.tolist() for c in model.net_g.calls] == real_y.tolist()
    else:
        (pool_labels,) = model.net_g.calls  # one call for all three critics, 8 samples of each class, in order
        assert torch.equal(pool_labels, torch.tensor([0] * 8 + [1] * 8))
        serial = (fakes[..., 0, 0, 0] * 1e4).round().long() % 10**4  # which pool sample each fake is
        assert torch.equal(serial // 8, real_y) and len(serial.unique()) > 8  # drawn from its class, not one each
    with pytest.raises(ValueError, match="critic_fakes"):
        tiny_gswgan(critic_fakes="shared")


def test_sound_pld_numbers_of_the_docs():
    """docs/LOG.md (GS-WGAN): 1,000 critics, B = 32; the PLD of the sound bound against its RDP conversion."""
    assert sound_pld_event(1000, 32, 2.77) == {"kind": "replace_poisson_gaussian", "sample_rate": 1e-3,
                                               "noise_multiplier": 2.77 / np.sqrt(32)}
    rdp = rdp_gswgan_step(1000, 32, 2.77, GSWGAN_ORDERS)["sound"]
    assert eps_from_rdp(rdp * 9116, GSWGAN_ORDERS, 1e-5)[0] == pytest.approx(10.0, abs=0.01)
    assert epsilon_pld([(sound_pld_event(1000, 32, 2.77), 9116)], 1e-5) == pytest.approx(6.03, abs=0.01)
    assert epsilon_pld([(sound_pld_event(1000, 32, 2.45), 9000)], 1e-5) == pytest.approx(9.79, abs=0.01)
    assert epsilon_pld([(sound_pld_event(1000, 32, 4.8), 9000)], 1e-5) == pytest.approx(0.98, abs=0.01)


def test_the_pld_budget_counts_the_sound_bound_and_refuses_kept_updates(tmp_path):
    model = tiny_gswgan(sanitizer={"noise_multiplier": 3.0})
    event = sound_pld_event(4, 8, 3.0)
    fitting = max(k for k in range(1, 60) if epsilon_pld([(event, k)], 1e-5) <= 5.0)
    assert fitting > 2  # the RDP conversion of the sound bound affords 2 (test_budget_stops_before_exceeding...)
    trainer = fit(model, 60, [PrivacyBudget(5.0, 1e-5, bound="sound", conversion="pld")], root=tmp_path)
    # every step costs the same: the budget plans the steps once and stops before the one that would exceed
    assert trainer.global_step == fitting and model.ledger.stop["discarded_steps"] == 0
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["conversion"] == "pld" and report["mechanisms"][MECHANISM["per_step"]]["count"] == fitting
    assert report["epsilon"] == report["total"]["sound"]["pld"]["epsilon"] <= 5.0
    assert "pld" not in report["total"]["as_published"]  # the event describes the sound bound only
    with pytest.raises(BudgetError, match="sound"):
        fit(tiny_gswgan(), 1, [PrivacyBudget(5.0, 1e-5, bound="as_published", conversion="pld")],
            root=tmp_path / "published")
    with pytest.raises(BudgetError, match="critic_updates=discarded"):
        fit(tiny_gswgan(critic_updates="kept"), 1, [PrivacyBudget(5.0, 1e-5, bound="sound", conversion="pld")],
            root=tmp_path / "kept")


def test_a_step_that_releases_other_than_its_cost_announced_is_checked_after_it(tmp_path, monkeypatch):
    """The budget's fixed-cost PLD plan holds only while the ledger holds what the plan expects; a step that
    releases something else (here: less noise than announced) sends the run back to a PLD check after each step."""
    model = tiny_gswgan(sanitizer={"noise_multiplier": 3.0})
    model.step_cost()  # announced at noise 3 (4 steps would fit eps 5), then the releases recorded at noise 2.5
    monkeypatch.setattr(SanitizerParams, "pld_events", lambda self, b: (sound_pld_event(4, b, 2.5), 1))
    dearer = sound_pld_event(4, 8, 2.5)
    fitting = max(k for k in range(1, 60) if epsilon_pld([(dearer, k)], 1e-5) <= 5.0)
    assert fitting == 2
    trainer = fit(model, 60, [PrivacyBudget(5.0, 1e-5, bound="sound", conversion="pld")], root=tmp_path)
    assert trainer.global_step == fitting + 1 and model.ledger.stop["discarded_steps"] == 1  # rolled back
    assert json.loads((tmp_path / "privacy.json").read_text())["epsilon"] <= 5.0


def test_trained_copies_of_critics_equal_the_ensembles_own_steps_and_leave_it_as_it_was():
    torch.manual_seed(0)
    ens = CriticEnsemble(4, (1, 8, 8), 2, model_dim=4, chunk_size=4).double()
    ens.steps += torch.tensor([0, 3, 0, 7])  # Adam's bias correction differs per critic
    before = copy.deepcopy(ens.state_dict())
    real, fake = torch.rand(2, 6, 1, 8, 8, dtype=torch.float64), torch.rand(2, 6, 1, 8, 8, dtype=torch.float64)
    y = torch.randint(0, 2, (2, 6))
    theta, m, v, steps = ens.copies(torch.tensor([1, 3]))
    steps += 1
    ens.adam_step(theta, m, v, steps, real, y, fake, torch.Generator().manual_seed(0))
    for name, value in ens.state_dict().items():
        assert torch.equal(value, before[name]), name  # the copies are not the ensemble's buffers
    # the same step taken by an ensemble of just those two critics
    pair = CriticEnsemble(2, (1, 8, 8), 2, model_dim=4, chunk_size=4).double()
    pair.load_state_dict({name: value[[1, 3]] for name, value in before.items()})
    pair.train_step(0, 2, real, y, fake, torch.Generator().manual_seed(0))
    assert steps.tolist() == pair.steps.tolist() == [4, 8]
    for name, value in pair.stacked(pair.params, 0, 2).items():
        assert torch.equal(theta[name], value), name


@pytest.mark.parametrize("updates,critic_steps", [("scheduled", 0), ("scheduled", 2), ("discarded", 2)])
def test_per_sample_draws_score_each_sample_with_its_own_critic_and_count_each(updates, critic_steps, tmp_path):
    """sanitizer.draw=per_sample: every step draws B critics with replacement, independently; copies of the drawn
    ones take `critic_steps` steps that are never kept (only the schedule's are), and the ledger charges B
    one-sample events per step, which the PLD budget plans with."""
    fit(tiny_gswgan(), 1, root=tmp_path / "warm")
    warm = torch.load(tmp_path / "warm" / WARM_START)["critics"]
    schedule = {"scheduled_critics": 2, "scheduled_steps": 1} if updates == "scheduled" else {}
    model = tiny_gswgan(sanitizer={"noise_multiplier": 3.0, "draw": "per_sample"}, critic_updates=updates,
                        critic_steps=critic_steps, pretrained_critics=str(tmp_path / "warm" / WARM_START), **schedule)
    trained_copies, score_each, drawn = model.trained_copies, model.critics.score_each, []

    def kept_steps(i: int, t: int) -> int:  # scheduled steps critic i has kept by step t (blocks of 2, step 0..t)
        return sum((i - 2 * u) % 4 < 2 for u in range(t + 1)) if updates == "scheduled" else 0

    def copies_spy(critics):
        t = len(drawn)
        assert model.critics.steps.tolist() == [int(warm["steps"][i]) + kept_steps(i, t) for i in range(4)]
        theta, loss = trained_copies(critics)
        drawn.append((critics.clone(), theta))
        return theta, loss

    def score_spy(theta, x, y):  # row i: the trained copy of the critic sample i drew
        critics, copies = drawn[-1]
        rows = [[u for u in range(len(critics)) if all(torch.equal(theta[k][i], copies[k][u]) for k in theta)]
                for i in range(len(x))]
        assert all(len(r) == 1 for r in rows) and {r[0] for r in rows} == set(range(len(critics)))
        return score_each(theta, x, y)

    model.trained_copies, model.critics.score_each = copies_spy, score_spy
    event = {"kind": "replace_poisson_gaussian", "sample_rate": 0.25, "noise_multiplier": 3.0}
    fitting = max(k for k in range(1, 60) if epsilon_pld([(event, 8 * k)], 1e-5) <= 5.0)
    trainer = fit(model, 60, [PrivacyBudget(5.0, 1e-5, bound="sound", conversion="pld")], root=tmp_path / "run")
    assert trainer.global_step == fitting == len(drawn) and model.ledger.stop["discarded_steps"] == 0
    assert all(0 <= c.min() and c.max() < 4 for c, _ in drawn) and any(len(c) > 1 for c, _ in drawn)
    after = model.critics.state_dict()
    assert after["steps"].tolist() == [int(warm["steps"][i]) + kept_steps(i, fitting - 1) for i in range(4)]
    if updates == "discarded":  # every critic is back at its warm start
        assert all(torch.equal(after[k], warm[k]) for k in warm)
    report = json.loads((tmp_path / "run" / "privacy.json").read_text())
    entry = report["mechanisms"][MECHANISM["per_sample"]]
    assert entry["count"] == 8 * fitting and entry["pld_event"] == event
    assert report["epsilon"] == pytest.approx(epsilon_pld([(event, 8 * fitting)], 1e-5))
    assert report["epsilon"] <= 5.0 < epsilon_pld([(event, 8 * (fitting + 1))], 1e-5)
    rdp = rdp_gswgan_step(4, 8, 3.0, GSWGAN_ORDERS, draw="per_sample")["sound"] * fitting
    assert report["total"]["sound"]["classical"]["epsilon"] == pytest.approx(eps_from_rdp(rdp, GSWGAN_ORDERS, 1e-5)[0])


def test_per_sample_draws_refuse_kept_updates_and_idle_critics():
    with pytest.raises(ValueError, match="per_sample needs critic_updates=discarded or scheduled"):
        tiny_gswgan(sanitizer={"draw": "per_sample"}, critic_updates="kept")
    with pytest.raises(ValueError, match="critic_steps must be >= 1"):
        tiny_gswgan(sanitizer={"draw": "per_sample"}, critic_updates="discarded", critic_steps=0)
    with pytest.raises(ValueError, match="critic_steps must be >= 1"):
        tiny_gswgan(critic_steps=0)
