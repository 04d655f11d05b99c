"""conf/experiment: one file per G-PATE paper cell we reproduce, composed with Hydra."""
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from dpgen.cli.common import CONF_DIR

IMAGES = {"mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28), "celeba_gender_s": (3, 32, 32),
          "celeba_gender_l": (3, 64, 64), "celeba_hair": (3, 64, 64)}
CLASSES = {"mnist": 10, "fashion_mnist": 10, "celeba_gender_s": 2, "celeba_gender_l": 2, "celeba_hair": 3,
           "kaggle_credit": 2}
# Table 1c (every image data set at eps 1 and 10), Table 2 (eps 0.2-0.8), Table 1a (Kaggle Credit)
CELLS = {f"gpate_{d}_eps{e}" for d in IMAGES for e in (1, 10)}
CELLS |= {f"gpate_{d}_eps{e}" for d in ("mnist", "fashion_mnist") for e in ("0.2", "0.4", "0.6", "0.8")}
CELLS |= {"gpate_kaggle_credit_eps1"}
# Table 4 (eps 1): the one value each ablation changes
ABLATIONS = {"proj5": ("method.module.aggregator.proj_dim", 5), "proj20": ("method.module.aggregator.proj_dim", 20),
             "projnone": ("method.module.aggregator.proj_dim", None),
             "teachers2000": ("method.n_teachers", 2000), "teachers3000": ("method.n_teachers", 3000),
             "clip5e-4": ("method.module.aggregator.clip", 5e-4), "clip5e-5": ("method.module.aggregator.clip", 5e-5),
             "clip1e-5": ("method.module.aggregator.clip", 1e-5),
             "bins5": ("method.module.aggregator.bins", 5), "bins20": ("method.module.aggregator.bins", 20)}
CELLS |= {f"gpate_{d}_ablation_{a}" for d in ("mnist", "fashion_mnist") for a in ABLATIONS}
# baseline configurations that differ from the method's default: the G-PATE paper's, or a kept cell's
BASELINE_CELLS = {"dpgan_gpate_appendix", "dpgan_b1024", "dpcgan_b1024", "gswgan_paper", "gswgan_per_sample",
                  "gswgan_per_step", "pate_triplegan_paper", "pate_triplegan_eps1"}


def composed_config(*overrides: str) -> dict:
    """The resolved method, data and privacy sections of `python train.py <overrides>`."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return {key: OmegaConf.to_container(cfg[key], resolve=True) for key in ("method", "data", "privacy")}


def composed(name: str, *overrides: str) -> dict:
    return composed_config(f"experiment={name}", *overrides)


def flat(tree: dict, prefix: str = "") -> dict:
    """{"a.b": value} leaves; method.module.n_teachers (an interpolation of method.n_teachers) is left out."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    if not prefix:
        assert out.pop("method.module.n_teachers") == out["method.n_teachers"]
    return out


def kept_config(run: str) -> dict:
    """The configuration a kept run recorded (docs/results/<run>/config.yaml)."""
    return yaml.safe_load((Path(__file__).parents[2] / "docs/results" / run / "config.yaml").read_text())


# options added after runs were kept, with the value that does what those runs did
ADDED_SINCE = {"m.module.critic_fakes": "own"}


def assert_method_is_kept(cfg: dict, run: str, unresolved: set[str]) -> dict:
    """The composed method section equals the kept run's but for the `unresolved` keys ("m."-prefixed: written as
    interpolations in the kept file, or given elsewhere there); an option the run predates must have the value of
    ADDED_SINCE. Returns the kept run's configuration."""
    kept = kept_config(run)
    got, was = flat(cfg["method"], "m."), flat(kept["method"], "m.")
    was.update({k: v for k, v in ADDED_SINCE.items() if k in got and k not in was})
    assert {k: v for k, v in got.items() if k not in unresolved} == {
        k: v for k, v in was.items() if k not in unresolved}
    return kept


def test_one_file_per_cell():
    assert {p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml")} == CELLS | BASELINE_CELLS
    for path in (Path(CONF_DIR) / "experiment").glob("*.yaml"):
        assert path.read_text().startswith("# @package _global_\n"), path.name


@pytest.mark.parametrize("name", sorted(CELLS))
def test_every_file_composes_and_builds_its_method(name):
    data = name[len("gpate_"):].split("_eps")[0].split("_ablation")[0]
    cfg = composed(name, "method.n_teachers=2")
    assert cfg["method"]["name"] == "gpate" and cfg["data"]["name"] == data
    assert cfg["privacy"]["delta"] == 1e-5 and cfg["privacy"]["bound"] == "data_dependent"
    if "_eps" in name:
        assert cfg["privacy"]["epsilon"] == float(name.split("_eps")[1])
    shape = IMAGES.get(data, (29,))
    model = instantiate(cfg["method"]["module"], shape=shape, num_classes=CLASSES[data],
                        kind="table" if data == "kaggle_credit" else "image")
    assert model.ensemble.n_teachers == 2
    assert model.agg.smooth is None and model.ensemble.pool == 1  # the paper's Algorithm 2 and whole images


@pytest.mark.parametrize("data", ["mnist", "fashion_mnist"])
def test_ablations_and_table2_change_exactly_one_value_of_the_eps1_cell(data):
    base = flat(composed(f"gpate_{data}_eps1"))
    for ablation, (key, value) in ABLATIONS.items():
        cfg = flat(composed(f"gpate_{data}_ablation_{ablation}"))
        assert {k for k in base if base[k] != cfg[k]} == {key} and cfg[key] == value, ablation
    for eps in ("0.2", "0.4", "0.6", "0.8"):
        cfg = flat(composed(f"gpate_{data}_eps{eps}"))
        assert {k for k in base if base[k] != cfg[k]} == {"privacy.epsilon"}


def test_paper_settings_of_appendix_e():
    one, ten = composed("gpate_mnist_eps1")["method"], composed("gpate_fashion_mnist_eps10")["method"]
    assert (one["n_teachers"], one["batch_size"], one["module"]["z_dim"]) == (4000, 15, 50)
    assert (one["module"]["aggregator"]["sigma1"], one["module"]["aggregator"]["sigma2"]) == (3000.0, 1000.0)
    assert (ten["n_teachers"], ten["batch_size"], ten["module"]["z_dim"]) == (2000, 30, 100)
    assert (ten["module"]["aggregator"]["sigma1"], ten["module"]["aggregator"]["sigma2"]) == (600.0, 100.0)
    assert one["module"]["aggregator"] | {"sigma1": 0, "sigma2": 0} == {
        "clip": 1e-4, "bins": 10, "proj_dim": 10, "sigma1": 0, "sigma2": 0, "threshold": 0.5, "smooth": None}
    # the reference teacher (not the CPU-sized default of conf/method/gpate.yaml): 555,655 parameters on MNIST
    assert one["module"]["teachers"]["channels"] is None and ten["module"]["teachers"]["hidden"] == 256
    assert not one["module"]["teachers"]["joint_batch_norm"]  # real and fake normalised apart, as the reference
    assert one["module"]["teachers"]["pool"] == ten["module"]["teachers"]["pool"] == 1  # not the CPU default's 2
    model = instantiate({**one["module"], "n_teachers": 1}, shape=(1, 28, 28), num_classes=10, kind="image")
    assert sum(p.numel() for p in model.ensemble.teacher(0).parameters()) == 555_655


def test_train_py_defaults_to_the_cpu_sized_gpate_on_mnist_at_its_own_budget():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config")
        dpgan = compose("config", overrides=["method=dpgan"])
    assert (cfg.method.name, cfg.data.name, cfg.method.max_steps) == ("gpate", "mnist", -1)  # budget-stopped
    assert cfg.privacy.epsilon == cfg.method.epsilon == 10.0 and dpgan.privacy.epsilon == 1.0


def test_kaggle_credit_cell_builds_the_pategan_sized_teachers_and_releases_the_ratio():
    cfg = composed("gpate_kaggle_credit_eps1")
    method = cfg["method"]
    assert (method["n_teachers"], method["batch_size"], method["module"]["class_ratio_epsilon"]) == (2100, 32, 0.01)
    agg = method["module"]["aggregator"]
    assert (agg["proj_dim"], agg["sigma1"], agg["sigma2"], agg["clip"]) == (5, 1500.0, 600.0, 1e-4)
    model = instantiate(method["module"], shape=(29,), num_classes=2, kind="table")
    # one hidden layer of d = 29 units: fc (29 + 2 labels) -> 29, BatchNorm 29, out (29 + 2) -> 1
    assert model.ensemble.n_teachers == 2100 and model.ensemble.shapes["fc.weight"] == (29, 31)
    assert sum(p.numel() for p in model.ensemble.teacher(0).parameters()) == 31 * 29 + 29 + 2 * 29 + 31 + 1
    assert model.class_ratio_epsilon == 0.01 and model.class_probs is None  # released at fit start


def test_hparams_search_is_a_multirun_grid_whose_every_job_composes():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["hparams_search=gpate_noise"], return_hydra_config=True)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN" and cfg.method.name == "gpate"
    grid = {key: str(values).split(",") for key, values in cfg.hydra.sweeper.params.items()}
    assert len(grid) == 3 and all(len(values) == 2 for values in grid.values())
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        job = compose("config", overrides=["method=gpate", *(f"{key}={values[-1]}" for key, values in grid.items())])
    assert job.method.n_teachers == int(grid["method.n_teachers"][-1])
    assert job.method.module.aggregator.sigma2 == float(grid["method.module.aggregator.sigma2"][-1])


def test_dpgan_gpate_appendix_is_the_appendix_e_configuration_and_differs_from_the_default():
    cfg = composed("dpgan_gpate_appendix")
    method, module = cfg["method"], cfg["method"]["module"]
    assert (method["name"], cfg["data"]["name"], cfg["privacy"]["epsilon"], cfg["privacy"]["delta"]) == (
        "dpgan", "mnist", 1.0, 1e-5)
    assert (method["batch_size"], module["noise_multiplier"], module["critic_steps"], module["weight_clip"]) == (
        64, 1.1, 5, 0.1)
    assert module["optimizer_d"] == module["optimizer_g"] == {"name": "rmsprop", "lr": 5e-5}
    model = instantiate(module, shape=IMAGES["mnist"], num_classes=10, kind="image", _convert_="all")
    # G-PATE appendix E: FC nets [128, 256, 512, 784] and [784, 64, 64, 1], WGAN (the class's objective)
    linears = [m for m in model.net_g.modules() if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in linears] == [256, 512, 784] and linears[0].in_features == 128 + 10
    assert model.fake_term == "public" and model.real_loss(torch.ones(3)).item() == -3.0  # -sum D(real)
    default = composed_config("method=dpgan")["method"]["module"]
    assert default["generator"]["arch"] == default["discriminator"]["arch"] == "conv"
    assert (default["objective"], default["critic_steps"], default["fake_term"]) == ("bce", 1, "clipped")


def test_gswgan_default_is_the_kept_per_sample_eps10_run_and_its_control():
    """GS-WGAN's default is the configuration of the kept MNIST eps = 10 run with one critic drawn for each sample
    and a fresh critic step (500 critics at noise 0.77), whose noise-free control, the same configuration with
    privacy off, is kept at 85.6%; it pretrains its own warm start."""
    cfg = composed_config("method=gswgan")
    assert (cfg["data"]["name"], cfg["privacy"]["epsilon"], cfg["method"]["private"]) == ("mnist", 10.0, True)
    assert cfg["method"]["module"]["pretrained_critics"] is None
    # the kept runs reused or wrote a warm start of their own; their files leave these unresolved
    unresolved = {"m.module.pretrained_critics", "m.module.seed", "m.module.batch_size"}
    assert_method_is_kept(cfg, "gswgan_mnist_eps10_per_sample_nd500_fresh1", unresolved)
    changed = {"m.private", "m.max_steps", "m.module.sanitizer.noise_multiplier"}  # the control's privacy off
    assert_method_is_kept(cfg, "gswgan_mnist_control_per_sample_nd500_fresh1", unresolved | changed)
    control = flat(kept_config("gswgan_mnist_control_per_sample_nd500_fresh1")["method"], "m.")
    assert (control["m.private"], control["m.module.sanitizer.noise_multiplier"]) == (False, 0.001)
    model = instantiate(cfg["method"]["module"], shape=IMAGES["mnist"], num_classes=10, kind="image",
                        _convert_="all")
    assert (model.n_discriminators, model.scheduled_critics, model.critic_steps) == (500, 50, 1)
    assert model.sanitizer.draw == "per_sample"


def test_gswgan_per_step_is_the_kept_control_with_privacy_on():
    """experiment=gswgan_per_step (the default until 2026-12-01) is the one-draw-per-step configuration whose
    noise-free control is kept at 85.5%, with privacy on, eps = 10 and the noise that affords its 4,000 steps, and
    the configuration of the kept run of it with privacy on."""
    cfg = composed("gswgan_per_step")
    assert (cfg["data"]["name"], cfg["privacy"]["epsilon"], cfg["method"]["private"]) == ("mnist", 10.0, True)
    assert cfg["method"]["module"]["sanitizer"]["noise_multiplier"] == 4.4
    # the draw: an option added since the kept runs, its value that run's loop; batch_size, seed: interpolations there
    assert cfg["method"]["module"]["sanitizer"]["draw"] == "per_step"
    changed = {f"m.{k}" for k in ("private", "epsilon", "module.sanitizer.noise_multiplier",
                                  "module.pretrained_critics", "module.batch_size", "module.seed",
                                  "module.sanitizer.draw")}
    assert_method_is_kept(cfg, "gswgan_mnist_control_nd100_m10_lr3e-4", changed)
    # the kept run of it with privacy on (made while it was the default, before the draw option existed)
    assert_method_is_kept(cfg, "gswgan_mnist_eps10_default",
                          {"m.module.sanitizer.draw", "m.module.seed", "m.module.batch_size"})
    model = instantiate(cfg["method"]["module"], shape=IMAGES["mnist"], num_classes=10, kind="image",
                        _convert_="all")
    assert (model.n_discriminators, model.scheduled_critics, model.lr, model.critic_steps) == (100, 10, 3e-4, 5)


def test_gswgan_paper_is_the_reference_configuration():
    """experiment=gswgan_paper: the reference code's 1,000 critics of width 64, 2,000 warm-up iterations, one
    critic of 5 steps per step, Adam 1e-4, 20,000 steps, and the sound bound's noise 1.07 * sqrt(32)."""
    method = composed("gswgan_paper")["method"]
    module = method["module"]
    assert (method["max_steps"], method["batch_size"], method["epsilon"]) == (20000, 32, 1.0)
    assert (module["n_discriminators"], module["critics"]["model_dim"], module["pretrain"]["steps"]) == (1000, 64, 2000)
    assert (module["scheduled_critics"], module["scheduled_steps"], module["critic_steps"]) == (1, None, 5)
    assert (module["lr"], module["betas"], module["z_dim"]) == (1e-4, [0.5, 0.9], 10)
    assert module["sanitizer"] == {"clip": 1.0, "noise_multiplier": 6.05, "draw": "per_step"}  # one critic per step
    assert round(1.07 * 32 ** 0.5, 2) == 6.05


def test_pate_triplegan_default_is_the_kept_b512_run_and_the_paper_differs_in_its_dpsgd_batch():
    """PATE-TripleGAN's default is the configuration of the kept MNIST eps = 10 run at a DP-SGD batch of 512 (Poisson
    batches of 512 at noise 0.52, whose noise-free control reached 88.3%); experiment=pate_triplegan_paper differs
    from it in those two settings only: the paper's one batch of 128 (dpsgd_batch_size None) and noise 0.4."""
    cfg = composed_config("method=pate_triplegan")
    assert_method_is_kept(cfg, "pate_triplegan_mnist_eps10_b512", {"m.n_teachers", "m.module.seed"})
    got = flat(cfg["method"], "m.")
    assert (cfg["privacy"]["epsilon"], cfg["privacy"]["conversion"]) == (10.0, "pld")
    paper_method = composed("pate_triplegan_paper")["method"]
    paper = flat(paper_method, "m.")
    assert {k for k in paper if paper[k] != got[k]} == {"m.module.dpsgd_batch_size", "m.module.noise_multiplier"}
    assert (paper["m.module.dpsgd_batch_size"], paper["m.module.noise_multiplier"]) == (None, 0.4)
    assert (got["m.module.dpsgd_batch_size"], got["m.module.noise_multiplier"]) == (512, 0.52)
    model = instantiate(paper_method["module"], shape=IMAGES["mnist"], num_classes=10, kind="image", _convert_="all")
    assert (model.batch_size, model.dpsgd_batch_size, model.n_teachers) == (128, 128, 100)


def test_pate_triplegan_eps1_is_the_kept_mnist_eps1_run():
    """experiment=pate_triplegan_eps1 composes the configuration of the table's MNIST eps = 1 cell (1,000 narrow
    teachers at vote noise 3,000, DP-SGD batch 1,024 at noise 1.5, run with privacy.epsilon=1 on the command line),
    and differs from the method's default only in those settings."""
    cfg = composed("pate_triplegan_eps1", "data=mnist")
    # unresolved there, or given as privacy.epsilon
    run = assert_method_is_kept(cfg, "pate_triplegan_mnist_eps1_t1000", {"m.n_teachers", "m.module.seed", "m.epsilon"})
    got = flat(cfg["method"], "m.")
    assert cfg["privacy"]["epsilon"] == run["privacy"]["epsilon"] == 1
    default = flat(composed_config("method=pate_triplegan")["method"], "m.")
    assert {k for k in got if got.get(k) != default.get(k)} == {
        "m.epsilon", "m.batch_size", "m.module.n_teachers", "m.module.sigma1", "m.module.sigma2",
        "m.module.dpsgd_batch_size", "m.module.noise_multiplier", "m.module.teachers.channels",
        "m.module.teachers.hidden", "m.n_teachers"}
    model = instantiate(cfg["method"]["module"], shape=IMAGES["mnist"], num_classes=10, kind="image", _convert_="all")
    assert (model.n_teachers, model.dpsgd_batch_size) == (1000, 1024)


def test_gswgan_per_sample_is_the_kept_mnist_eps10_run():
    """experiment=gswgan_per_sample composes the configuration of the table's MNIST eps = 10 cell (500 critics, one
    drawn for each sample at noise 0.77, 50 scheduled, no steps of the drawn critics, 20 warm-up iterations), and
    differs from the method's default only in the drawn critics' steps (0, against 1)."""
    cfg = composed("gswgan_per_sample", "data=mnist")
    # the kept run reused its control's warm start (a path of its own); its file leaves these unresolved
    assert_method_is_kept(cfg, "gswgan_mnist_eps10_per_sample_nd500",
                          {"m.module.pretrained_critics", "m.module.seed", "m.module.batch_size"})
    got, default = flat(cfg["method"], "m."), flat(composed_config("method=gswgan")["method"], "m.")
    assert {k for k in got if got[k] != default[k]} == {"m.module.critic_steps"}
    model = instantiate(cfg["method"]["module"], shape=IMAGES["mnist"], num_classes=10, kind="image", _convert_="all")
    assert (model.n_discriminators, model.sanitizer.draw, model.critic_steps) == (500, "per_sample", 0)


@pytest.mark.parametrize("method,data", [("dpgan", "mnist"), ("dpgan", "fashion_mnist"), ("dpcgan", "mnist"),
                                         ("dpcgan", "fashion_mnist")])
def test_b1024_is_the_kept_eps1_run(method, data):
    """experiment=dpgan_b1024 and experiment=dpcgan_b1024 compose the configuration of the table's eps = 1 cells they
    stand for (Poisson batches of 1,024 at noise 3, run with privacy.epsilon=1 on the command line), and differ from
    the method's default only there."""
    cfg = composed(f"{method}_b1024", f"data={data}")
    run = assert_method_is_kept(cfg, f"{method}_{data}_eps1_b1024", {"m.module.batch_size", "m.module.seed"})
    got = flat(cfg["method"], "m.")
    assert cfg["privacy"]["epsilon"] == run["privacy"]["epsilon"] == 1
    default = flat(composed_config(f"method={method}")["method"], "m.")
    noise = {"m.module.noise_multiplier"} if method == "dpgan" else set()  # DP-CGAN's default noise is already 3
    assert {k for k in got if got[k] != default[k]} == {"m.batch_size", "m.module.batch_size"} | noise
    model = instantiate(cfg["method"]["module"], shape=IMAGES["mnist"], num_classes=10, kind="image", _convert_="all")
    assert (model.batch_size, model.noise_multiplier) == (1024, 3.0)
