"""python -m dpgen.cli.plan: steps within the budget from the Hydra configs (dpgen.cli.plan)."""
import numpy as np
import pytest
import torch

from hydra import compose, initialize_config_dir

from dpgen.aggregation import hybrid, pate_vote
from dpgen.aggregation.dpgradagg import DPGradAggParams, worst_case_rdp
from dpgen.privacy.pate import rdp_confident_gnmax_batch
from dpgen.cli.common import CONF_DIR
from dpgen.cli.plan import main
from dpgen.cli.train import build_datamodule, build_method
from dpgen.data.split import stratified_split
from dpgen.privacy.dpsgd import rdp_subsampled_gaussian
from dpgen.privacy.gswgan import GSWGAN_ORDERS, rdp_sampled_wor_gaussian, sound_pld_event
from dpgen.privacy.laplace import rdp_laplace
from dpgen.privacy import pld
from dpgen.privacy.ledger import PrivacyLedger
from dpgen.privacy.plan import MAX_STEPS
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp

MNIST = ["data=mnist", "data.root=/nonexistent", "data.download=false"]  # 60,000 records, known without loading
ORDERS = np.asarray(DEFAULT_ORDERS, dtype=float)


def assert_largest(eps, n, epsilon):
    """n is the largest step count within the budget: eps(n) <= epsilon < eps(n + 1)."""
    assert eps(n) <= epsilon < eps(n + 1)


def test_mnist_eps1_matches_the_privacy_planner_without_loading_data():
    # the paper's cell (4000 teachers; the method default is CPU-sized since 28036e5):
    # b = min(15, 60000 / 4000 = 15) = 15 fake samples, k = 10: 150 queries per step
    # without the private validation split the comparison cell holds out (its size is known only after loading)
    result = main(["experiment=gpate/mnist_eps1", "eval.selection=synthetic", "data.root=/nonexistent",
                   "data.download=false"])
    assert result["records_source"] == "known size" and result["records"] == 60_000
    assert (result["batch"], result["queries_per_step"]) == (15, 150)
    # independently: worst case 150 answered queries per step, data-independent (appendix D); best case (the
    # data-dependent bound) 4000 unanimous teachers, answered or not, whichever is cheaper
    agg = DPGradAggParams(sigma1=3000.0, sigma2=1000.0, threshold=0.5)
    worst = worst_case_rdp(agg, 150, ORDERS)
    unanimous = np.zeros((1, 10))
    unanimous[0, 0] = 4000
    best = 150 * np.minimum(*(rdp_confident_gnmax_batch(unanimous, 2000.0, 3000.0, 1000.0, ORDERS, [answered])[0]
                              for answered in (True, False)))
    assert_largest(lambda g: eps_from_rdp(g * worst, ORDERS, 1e-5)[0], result["worst_case_steps"], 1.0)
    assert_largest(lambda g: eps_from_rdp(g * best, ORDERS, 1e-5)[0], result["best_case_steps"], 1.0)
    # the run of this cell (docs/results/gpate_mnist_eps1: 53% of its queries answered) released 235 steps
    assert result["worst_case_steps"] == 131 < 235 < result["best_case_steps"]


def test_experiment_and_overrides_change_the_plan():
    ten = main(["experiment=gpate/fashion_mnist_eps10"])
    assert (ten["teachers"], ten["batch"], ten["queries_per_step"], ten["epsilon"]) == (2000, 30, 300, 10.0)
    # without projection every pixel is a query: 15 * 784
    assert main(["experiment=unmeasured/gpate/mnist_eps1_ablation_projnone"])["queries_per_step"] == 15 * 784
    # b is the teachers' batch size whatever the partition sizes (6 records each on average here)
    assert main(["experiment=gpate/mnist_eps1", "method.n_teachers=10000"])["batch"] == 15


def test_known_sizes_equal_the_data_code():
    # Kaggle Credit: 284,315 normal and 492 fraud; stratified_split sends round(n_c * 0.2) of each class to test
    labels = torch.cat([torch.zeros(284_315, dtype=torch.long), torch.ones(492, dtype=torch.long)])
    train, _ = stratified_split(labels, 0.2, 0)
    result = main(["experiment=unmeasured/gpate/kaggle_credit_eps1"])
    assert result["records"] == len(train) == (284_315 - 56_863) + (492 - 98)
    assert result["batch"] == 32


def test_the_class_ratio_release_is_paid_first():
    with_ratio = main(["experiment=unmeasured/gpate/kaggle_credit_eps1"])
    without = main(["experiment=unmeasured/gpate/kaggle_credit_eps1", "method.module.class_ratio_epsilon=null"])
    orders = np.asarray(DEFAULT_ORDERS, dtype=float)
    agg = DPGradAggParams(clip=1e-4, bins=10, proj_dim=5, sigma1=1500.0, sigma2=600.0)
    step, prior = worst_case_rdp(agg, 32 * 5, orders), rdp_laplace(0.01, orders)
    n = with_ratio["worst_case_steps"]

    def eps(total):
        return eps_from_rdp(total, orders, 1e-5)[0]

    assert eps(prior + n * step) <= 1.0 < eps(prior + (n + 1) * step)  # the largest n that fits
    assert 0 < n <= without["worst_case_steps"]


def test_unknown_sizes_are_counted_by_loading(tmp_path):
    path = tmp_path / "t.csv"
    rows = ["a,b,label"] + [f"{i % 7 / 7},{i % 3 / 3},{i % 2}" for i in range(50)]
    path.write_text("\n".join(rows) + "\n")
    result = main(["method=gpate", "data=csv", f"data.path={path}", "data.label=label", "data.classes=[0,1]",
                   "data.default_range=[0,1]", "method.n_teachers=4", "method.batch_size=32"])
    # 25 + 25 records, 5 of each class to test: 40 training records; b = 32 (drawn again where a partition is
    # smaller), k = 10
    assert result["records_source"] == "loaded" and result["records"] == 40
    assert (result["batch"], result["queries_per_step"]) == (32, 320)


def test_a_private_validation_split_is_counted_out_of_the_records(tmp_path):
    path = tmp_path / "t.csv"
    rows = ["a,b,label"] + [f"{i / 400},{i % 3 / 3},{i % 2}" for i in range(400)]
    path.write_text("\n".join(rows) + "\n")
    data = ["data=csv", f"data.path={path}", "data.label=label", "data.classes=[0,1]", "data.default_range=[0,1]"]
    full = main(["method=dpcgan", "method.batch_size=20", "method.module.noise_multiplier=3", *data])
    held = main(["method=dpcgan", "method.batch_size=20", "method.module.noise_multiplier=3", *data,
                 "eval.selection=private_val", "eval.private_val.fraction=0.25"])
    # what the training run's datamodule keeps: the records whose keyed hash is not in the held-out quarter
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["method=dpcgan", *data, "eval.selection=private_val",
                                           "eval.private_val.fraction=0.25"])
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    assert full["records"] == 320 and held["records"] == len(dm.train_data) < 280  # about 240 kept
    assert held["records_source"] == "loaded" and held["best_case_steps"] < full["best_case_steps"]


def test_a_method_without_planner_is_a_clear_error():
    with pytest.raises(ValueError, match="no privacy planner for method=gan") as err:
        main(["method=gan"])
    for name in ("dpcgan", "dpgan", "dpmerf", "gpate", "gswgan", "pate_triplegan", "pategan"):
        assert name in str(err.value)
    with pytest.raises(ValueError, match="no privacy planner for method=nope"):
        main(["method=dpgan", "method.name=nope"])


def test_dpgan_counts_generator_steps_of_five_dpsgd_steps():
    result = main(["experiment=published/dpgan_gpate_appendix", *MNIST])
    n, q = result["worst_case_steps"], 64 / 60_000
    assert (result["best_case_steps"], result["dpsgd_steps_per_step"], result["sample_rate"]) == (n, 5, q)
    assert "each 5 DP-SGD steps" in result["step_unit"]
    # independently: 5 n Poisson-subsampled Gaussian steps at sigma 1.1
    assert_largest(lambda g: eps_from_rdp(rdp_subsampled_gaussian(q, 1.1, 5 * g, ORDERS), ORDERS, 1e-5)[0], n, 1.0)
    assert 3000 < n < 3500  # conf/method/dpgan_gpate_appendix.yaml: "~3200 generator steps at eps=1"


def test_dpgan_default_is_one_dpsgd_step_of_batch_256_per_generator_step():
    result = main(["method=dpgan", "privacy.epsilon=1", *MNIST])
    n, q = result["worst_case_steps"], 256 / 60_000
    assert (result["best_case_steps"], result["dpsgd_steps_per_step"], result["sample_rate"]) == (n, 1, q)
    assert_largest(lambda g: eps_from_rdp(rdp_subsampled_gaussian(q, 1.5, g, ORDERS), ORDERS, 1e-5)[0], n, 1.0)
    assert 3700 < n < 3900  # conf/method/dpgan.yaml: "~3800 generator steps at eps=1"


def test_dpcgan_plan_is_what_the_method_charges_per_step():
    overrides = ["method=dpcgan_reference", "method.module.noise_multiplier=2", "privacy.epsilon=1", *MNIST]
    n = main(overrides)["worst_case_steps"]
    assert_largest(lambda g: eps_from_rdp(rdp_subsampled_gaussian(0.01, 2.0, g, ORDERS), ORDERS, 1e-5)[0], n, 1.0)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    model = build_method(cfg, build_datamodule(cfg))  # FC nets: cheap; no data read
    model.sample_rate = 600 / 60_000  # what setup() sets from the training set
    model.configure_optimizers()
    step = model.step_cost().worst["data_independent"]  # what training_step records and PrivacyBudget checks
    assert_largest(lambda g: eps_from_rdp(g * step, ORDERS, 1e-5)[0], n, 1.0)
    # the reference sigma 1.12 (C = 1.1): one step costs eps = 1.06 > 1 under the classical conversion
    assert main(["method=dpcgan_reference", "privacy.epsilon=1", *MNIST])["best_case_steps"] == 0
    assert main(["method=dpcgan_reference", *MNIST])["best_case_steps"] == 24_413  # hence its default budget eps = 10


def test_dpmerf_plan_is_the_release_its_run_makes_and_free_steps(capsys):
    result = main(["method=dpmerf", "privacy.epsilon=1", *MNIST])
    assert result["conversion"] == "gdp" and result["sigma"] == pytest.approx(3.7306 * result["sensitivity"], rel=1e-4)
    assert result["best_case_steps"] == result["worst_case_steps"] == MAX_STEPS
    printed = " ".join(capsys.readouterr().out.split())  # the console wraps lines
    assert "every step after it is free: the run stops at method.max_steps=2,000." in printed
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["method=dpmerf", "privacy.epsilon=1", *MNIST])
    model = build_method(cfg, build_datamodule(cfg))
    assert model.sigma == result["sigma"]  # the run calibrates its noise exactly as the plan does
    assert model.step_cost().epsilon(1e-5, "data_independent", "gdp", n=10**6) == pytest.approx(1.0, rel=1e-9)


def test_a_guided_dpmerf_plan_is_the_two_releases_its_run_makes():
    overrides = ["experiment=dpmerf/mnist_eps1_guide", "eval.selection=synthetic", *MNIST]  # N known: 60,000
    result = main(overrides)
    assert result["conversion"] == "improved" and result["best_case_steps"] == MAX_STEPS
    assert (result["guide_sample_rate"], result["guide_steps"]) == (512 / 60_000, 938)  # 8 epochs: 8 / q, rounded up
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    model = build_method(cfg, build_datamodule(cfg))
    records = type("Records", (), {"__len__": lambda self: 60_000})()
    model.trainer = type("Trainer", (), {"datamodule": type("DM", (), {"train_data": records})()})()
    model.setup("fit")  # what the run plans once it knows N
    assert model.sigma == result["sigma"]  # the run calibrates both releases as the plan does
    plan = model.guide_plan
    assert (plan["steps"], plan["noise_multiplier"]) == (result["guide_steps"], result["guide_noise_multiplier"])
    spent = model.step_cost().epsilon(1e-5, "data_independent", "improved", n=10**6)
    assert 1.0 - 1e-4 < spent <= 1.0


def test_pategan_plan_charges_every_labelled_sample():
    result = main(["method=pategan", *MNIST])  # 100 teachers, lam 0.2, n_S = 5 student steps of 64 samples
    assert result["queries_per_step"] == 320
    unanimous = np.tile([100.0, 0.0], (320, 1))  # [fake, real] counts, as teacher_votes gives them
    best = pate_vote.batch_rdp(unanimous, 0.2, ORDERS)  # what student_step records, data-dependent
    worst = pate_vote.worst_case_rdp(0.2, 320, ORDERS)  # the data-independent worst case PrivacyBudget checks
    assert_largest(lambda g: eps_from_rdp(g * best, ORDERS, 1e-5)[0], result["best_case_steps"], 1.0)
    assert result["worst_case_steps"] == 0 < eps_from_rdp(worst, ORDERS, 1e-5)[0] - 1.0
    ten = main(["method=pategan", "privacy.epsilon=10", "method.module.lam=0.01", *MNIST])
    worst = pate_vote.worst_case_rdp(0.01, 320, ORDERS)
    assert_largest(lambda g: eps_from_rdp(g * worst, ORDERS, 1e-5)[0], ten["worst_case_steps"], 10.0)


def test_gswgan_plans_both_bounds_and_the_governing_one():
    overrides = ["experiment=published/gswgan_paper", "method.module.n_discriminators=100", *MNIST]
    result = main([*overrides, "privacy.conversion=classical"])  # B = 32, sigma 6.05
    as_published = rdp_sampled_wor_gaussian(100, 6.05, 32, GSWGAN_ORDERS)
    sound = rdp_sampled_wor_gaussian(100, 6.05 / np.sqrt(32), 1, GSWGAN_ORDERS)
    for rdp, n in [(as_published, result["as_published_steps"]), (sound, result["sound_steps"])]:
        assert_largest(lambda g: eps_from_rdp(g * rdp, GSWGAN_ORDERS, 1e-5)[0], n, 1.0)
    assert result["governing"] == "sound" and result["best_case_steps"] == result["worst_case_steps"] == result["sound_steps"]
    published = main([*overrides, "privacy.bound=as_published", "privacy.conversion=classical"])
    assert published["best_case_steps"] == published["worst_case_steps"] == result["as_published_steps"]
    # the default conversion, pld, prices the sound bound by its PLD and the paper's (no PLD) classically
    default = main([*overrides, "method.module.sanitizer.noise_multiplier=20"])
    event = sound_pld_event(100, 32, 20.0)
    assert_largest(lambda g: pld.epsilon_pld([(event, g)], 1e-5), default["sound_steps"], 1.0)
    assert default["sound_steps"] == default["worst_case_steps"] > 1199  # 1,199 by the RDP conversion
    assert (default["sound_conversion"], default["as_published_conversion"]) == ("pld", "classical")
    scheduled = main([*overrides, "method.module.sanitizer.noise_multiplier=20", "method.module.critic_updates=scheduled"])
    assert scheduled["sound_steps"] == default["sound_steps"]  # the same subsampled mechanism per step
    with pytest.raises(ValueError, match="describes the bounds"):
        main([*overrides, "privacy.bound=as_published"])
    with pytest.raises(ValueError, match="critic_updates=discarded"):  # the PLD needs the per-step structure
        main([*overrides, "method.module.critic_updates=kept"])
    with pytest.raises(ValueError, match="not a GS-WGAN bound"):
        main([*overrides, "privacy.bound=nonsense"])


def test_gswgan_with_per_sample_draws_plans_b_one_sample_events_per_step():
    """sanitizer.draw=per_sample: B independent draws per step, each a subsampled Gaussian at sigma (one sample's
    sensitivity), so the paper's count and the sound one agree; the PLD composes B T one-sample events."""
    overrides = ["method=gswgan", "method.module.sanitizer.draw=per_sample", "method.module.n_discriminators=100",
                 "method.module.sanitizer.noise_multiplier=3", *MNIST]
    result = main(overrides)  # B = 32
    event = {"kind": "replace_poisson_gaussian", "sample_rate": 0.01, "noise_multiplier": 3.0}
    assert result["draw"] == "per_sample" and result["governing"] == "sound"
    assert result["mechanism"] == "gswgan_sanitizer_per_sample"  # the name the run's ledger records
    assert_largest(lambda g: pld.epsilon_pld([(event, 32 * g)], 1e-5), result["sound_steps"], 10.0)
    assert 2500 < result["sound_steps"] == result["worst_case_steps"] < 3500  # docs/LOG.md: about 3,000 at 3.11
    classical = main([*overrides, "privacy.conversion=classical"])
    rdp = rdp_sampled_wor_gaussian(100, 3.0, 32, GSWGAN_ORDERS)
    for bound in ("sound", "as_published"):
        assert_largest(lambda g: eps_from_rdp(g * rdp, GSWGAN_ORDERS, 1e-5)[0], classical[f"{bound}_steps"], 10.0)
    with pytest.raises(ValueError, match="per_sample needs critic_updates=discarded or scheduled"):
        main([*overrides, "method.module.critic_updates=kept", "privacy.conversion=classical"])


def ledger_after(steps, answered, accounting="rdp", ledger=None, dpsgd_batch=128, noise_multiplier=0.4):
    """A ledger (new, or `ledger`) charged `steps` more times as PATETripleGAN.student_step charges it
    (hybrid.record): 128 queries and a DP-SGD step on Poisson batches of `dpsgd_batch` of MNIST's records."""
    p = hybrid.HybridParams(accounting=accounting, noise_multiplier=noise_multiplier)
    ledger = PrivacyLedger(ORDERS) if ledger is None else ledger
    votes = np.tile([50.0, 50.0], (128, 1))
    release = hybrid.VoteRelease(votes, np.full(128, answered), np.zeros(128, dtype=np.int64))
    for _ in range(steps):
        hybrid.record(ledger, p, release, dpsgd_batch / 60_000)
    return ledger


def test_pate_triplegan_plans_votes_and_dpsgd_as_the_method_charges_them():
    # the paper's DP-SGD noise 0.4 under RDP: a single step costs eps > 6; eps = 10 buys a few steps
    classical = ["privacy.conversion=classical", "method.module.vote_charge=answered"]
    result = main(["experiment=published/pate_triplegan_paper", "privacy.epsilon=10", *classical, *MNIST])
    assert (result["queries_per_step"], result["dpsgd_steps_per_step"]) == (128, 1)
    assert main(["experiment=published/pate_triplegan_paper", "privacy.epsilon=1", *classical,
                 *MNIST])["best_case_steps"] == 0
    for answered, n in [(True, result["worst_case_steps"]), (False, result["best_case_steps"])]:
        assert_largest(lambda g: ledger_after(g, answered).epsilon(1e-5)[0], n, 10.0)
    clt = main(["experiment=published/pate_triplegan_paper", "method.module.accounting=clt", "privacy.conversion=gdp",
                "privacy.epsilon=1", "method.module.vote_charge=answered", *MNIST])
    for answered, n in [(True, clt["worst_case_steps"]), (False, clt["best_case_steps"])]:
        assert_largest(lambda g: ledger_after(g, answered, "clt").epsilon(1e-5, conversion="gdp")[0], n, 1.0)
    assert 0 < clt["worst_case_steps"] < clt["best_case_steps"]
    with pytest.raises(ValueError, match="accounting=clt"):
        main(["experiment=published/pate_triplegan_paper", "privacy.conversion=gdp", *MNIST])
    assert main(["experiment=published/pate_triplegan_paper", "method.module.percent=0.3",
                 *MNIST])["teachers"] == 100  # of 333
    with pytest.raises(ValueError, match="method.n_teachers=333"):
        main(["experiment=published/pate_triplegan_paper", "method.module.percent=0.3", "method.n_teachers=125",
              *MNIST])


def test_pld_plans_dpsgd_and_pate_triplegan_as_their_ledgers_compose_them():
    # DP-CGAN's reference sigma 1.12 at eps = 1: no step under RDP (above), a run under the PLD conversion
    n = main(["method=dpcgan_reference", "privacy.epsilon=1", "privacy.conversion=pld", *MNIST])["worst_case_steps"]
    assert_largest(lambda g: pld.epsilon_pld([(pld.dpsgd_event(0.01, 1.12), g)], 1e-5), n, 1.0)
    assert n > 100
    # PATE-TripleGAN's paper settings at eps = 10: every query charged as answered (the default), far more steps
    # than the 9 under RDP; the paper's charge of answered queries only has no proven PLD composition: refused
    result = main(["experiment=published/pate_triplegan_paper", "privacy.epsilon=10", "privacy.conversion=pld",
                   *MNIST])
    assert result["best_case_steps"] == result["worst_case_steps"]
    n = result["worst_case_steps"]
    ledger = ledger_after(n, True)
    assert ledger.epsilon(1e-5, conversion="pld")[0] <= 10.0
    assert ledger_after(1, True, ledger=ledger).epsilon(1e-5, conversion="pld")[0] > 10.0
    rdp = main(["experiment=published/pate_triplegan_paper", "privacy.epsilon=10", "privacy.conversion=classical",
                "method.module.vote_charge=answered", *MNIST])
    assert n > 10 * rdp["worst_case_steps"]
    with pytest.raises(ValueError, match="vote_charge=every"):
        main(["experiment=published/pate_triplegan_paper", "privacy.conversion=pld",
              "method.module.vote_charge=answered", *MNIST])
    # the method's default: DP-SGD on Poisson batches of 512 records at noise 0.52, the votes' 128 queries unchanged
    default = main(["method=pate_triplegan", *MNIST])
    assert (default["sample_rate"], default["queries_per_step"]) == (512 / 60_000, 128)
    assert default["best_case_steps"] == default["worst_case_steps"]
    assert_largest(lambda g: ledger_after(g, True, dpsgd_batch=512, noise_multiplier=0.52).epsilon(
        1e-5, conversion="pld")[0], default["worst_case_steps"], 10.0)
    # DP-SGD on Poisson batches of 2,048 records at noise 0.8, the votes' 128 queries unchanged: q = 2048 / N
    large = main(["method=pate_triplegan", "method.module.dpsgd_batch_size=2048", "method.module.noise_multiplier=0.8",
                  *MNIST])
    assert (large["sample_rate"], large["queries_per_step"]) == (2048 / 60_000, 128)
    n = large["worst_case_steps"]
    assert_largest(lambda g: ledger_after(g, True, dpsgd_batch=2048, noise_multiplier=0.8).epsilon(
        1e-5, conversion="pld")[0], n, 10.0)
    assert n > result["worst_case_steps"]  # more steps, and noise 0.8 / 2048 per averaged gradient, not 0.4 / 128
    with pytest.raises(ValueError, match="accounting=rdp"):
        main(["experiment=published/pate_triplegan_paper", "method.module.accounting=clt", "privacy.conversion=pld",
              *MNIST])
    with pytest.raises(ValueError, match="conversion=pld"):
        main(["method=gpate", "privacy.conversion=pld", *MNIST])


def test_help_and_command_line_mistakes(capsys):
    from dpgen.cli.plan import cli

    cli(["--help"])
    assert "How many training steps" in capsys.readouterr().out
    for argv, said in ((["--cfg", "job"], "--cfg: the planner takes only Hydra overrides"),
                       (["method.module.nope=1"], "method.module.nope"), (["method=nope"], "choose one of")):
        with pytest.raises(SystemExit) as exit_:
            cli(argv)
        assert exit_.value.code == 2 and said in capsys.readouterr().out
