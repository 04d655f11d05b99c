"""conf/experiment: one file per comparison cell (`<method>/<data>_eps<e>`, the configuration of the kept run that
stands there), the G-PATE paper's other cells under unmeasured/, and the published configurations that do not learn
under published/; every file composed with Hydra."""
import math
import re
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from dpgen.cli.common import CONF_DIR

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = Path(CONF_DIR) / "experiment"
NAMES = sorted(str(p.relative_to(EXPERIMENTS).with_suffix("")) for p in EXPERIMENTS.rglob("*.yaml"))
COMPARISON = yaml.safe_load((REPO / "docs/results/comparison.yaml").read_text())
TABLES = yaml.safe_load((REPO / "docs/results/tables.yaml").read_text())["cells"]  # the tabular cells
CELLS = {**{cell["experiment"]: cell["run"] for method in COMPARISON["methods"] for cell in method["cells"].values()},
         **{cell["experiment"]: cell["run"] for cell in TABLES if cell["run"]}}
IMAGES = {"mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28), "celeba_gender_s": (3, 32, 32),
          "celeba_gender_l": (3, 64, 64), "celeba_hair": (3, 64, 64)}
CLASSES = {"mnist": 10, "fashion_mnist": 10, "celeba_gender_s": 2, "celeba_gender_l": 2, "celeba_hair": 3,
           "kaggle_credit": 2}
# The G-PATE paper's cells: Table 1c (every image data set at eps 1 and 10), Table 2 (eps 0.2-0.8), Table 1a (Kaggle
# Credit); those with a kept run are comparison cells, the others unmeasured
PAPER_CELLS = {f"{d}_eps{e}" for d in IMAGES for e in (1, 10)}
PAPER_CELLS |= {f"{d}_eps{e}" for d in ("mnist", "fashion_mnist") for e in ("0.2", "0.4", "0.6", "0.8")}
PAPER_CELLS |= {"kaggle_credit_eps1"}
# Table 4 (eps 1): the one value each ablation changes
ABLATIONS = {"proj5": ("method.module.aggregator.proj_dim", 5), "proj20": ("method.module.aggregator.proj_dim", 20),
             "projnone": ("method.module.aggregator.proj_dim", None),
             "teachers2000": ("method.n_teachers", 2000), "teachers3000": ("method.n_teachers", 3000),
             "clip5e-4": ("method.module.aggregator.clip", 5e-4), "clip5e-5": ("method.module.aggregator.clip", 5e-5),
             "clip1e-5": ("method.module.aggregator.clip", 1e-5),
             "bins5": ("method.module.aggregator.bins", 5), "bins20": ("method.module.aggregator.bins", 20)}
PAPER_CELLS |= {f"{d}_eps1_ablation_{a}" for d in ("mnist", "fashion_mnist") for a in ABLATIONS}
GPATE_PAPER = sorted(f"gpate/{c}" if f"gpate/{c}" in CELLS else f"unmeasured/gpate/{c}" for c in PAPER_CELLS)
# published configurations that do not learn, each naming the kept run that shows it
PUBLISHED = {"dpgan_gpate_appendix", "gswgan_paper", "gswgan_per_step", "pate_triplegan_paper"}

# Options added since some kept runs were made, with the value that does what those runs did
ADDED_SINCE = {
    "privacy.allow_large_delta": False,  # refuses a delta not below 1/N: the kept runs' 1e-5 is below it
    "eval.private_val.budget": None, "eval.callbacks.downstream.private_val_budget": None,  # no stated budget
    "method.module.features": None,  # DP-MERF's pixel random Fourier features
    "method.module.guide": None,  # DP-MERF without a guide (its second release)
    "method.module.lr_decay": None,  # DP-MERF's generator at its constant rate
    "method.module.generator.members": 1,  # DP-MERF with one generator
    "method.module.relabel": None,  # DP-MERF's samples with the labels the generator drew them for
    "method.module.critic_fakes": "own",  # GS-WGAN's fakes as its loop drew them
    "method.module.ema_decay": 0.0,  # the trained generator released, no moving average
    # the non-private GAN's rows predate the three selection protocols and the downstream options: the CNN of
    # appendix E with Adam (1e-3, batch 128), its epoch chosen on the synthetic hold-out
    "eval.selection": "synthetic", "eval.classifier": "appendix_e", "eval.private_val.fraction": 0.0167,
    "eval.private_val.epsilon": math.inf, "eval.callbacks.downstream.selection": "synthetic",
    "eval.callbacks.downstream.private_val_epsilon": math.inf, "eval.callbacks.downstream.cnn": "appendix_e",
    "eval.callbacks.downstream.optimizer": "adam", "eval.callbacks.downstream.lr": 1e-3,
    "eval.callbacks.downstream.batch_size": 128, "eval.callbacks.downstream.state_file": None,
    "eval.callbacks.downstream.repeats": 1,  # the image classifier trained once
}
# Fields that do not change what a run computes, left out of the comparison with its kept run: where the run wrote
# (output_dir, the logger's folder and version), the checkpoint an interrupted run continued from (resume: the same
# ledger and state, so the result of an uninterrupted run), the device (trainer.accelerator: a kept cell ran on a
# GPU; the experiment is the configuration, `trainer=gpu` the machine), and GS-WGAN's warm start file
# (method.module.pretrained_critics: kept runs reused the one their noise-free control wrote with the same warm-up
# steps and seed, a path of that machine; the experiment writes its own), and G-PATE's
# method.reference_sample_batch_norm (read by eval=reference alone, into eval.callbacks.downstream, which is compared).
NOT_RESULT = ("output_dir", "logger.", "resume", "trainer.accelerator", "method.module.pretrained_critics",
              "method.reference_sample_batch_norm")


def compose_all(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def composed_config(*overrides: str) -> dict:
    """The resolved method, data and privacy sections of `python train.py <overrides>`."""
    cfg = compose_all(*overrides)
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


def assert_method_is_kept(cfg: dict, run: str, unresolved: set[str]) -> dict:
    """The composed method section equals the kept run's but for the `unresolved` keys ("m."-prefixed: written as
    interpolations in the kept file, or given elsewhere there); an option the run predates must have the value of
    ADDED_SINCE. Returns the kept run's configuration."""
    kept = kept_config(run)
    got, was = flat(cfg["method"], "m."), flat(kept["method"], "m.")
    added = {f"m.{key.removeprefix('method.')}": value for key, value in ADDED_SINCE.items()}
    was.update({k: v for k, v in added.items() if k in got and k not in was})
    assert {k: v for k, v in got.items() if k not in unresolved} == {
        k: v for k, v in was.items() if k not in unresolved}
    return kept


def leaves(tree: dict, prefix: str = "") -> dict:
    """{"a.b": value} for every leaf of `tree`."""
    out = {}
    for key, value in tree.items():
        out.update(leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def result_fields(cfg) -> dict:
    """The resolved leaves of a run's configuration that decide its result: all but NOT_RESULT, evaluation callbacks
    set to null (off) dropped as if removed with ~eval.callbacks.<name>."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    cfg.output_dir = "unresolved"  # ${hydra:runtime.output_dir} outside a Hydra job
    return {key: value for key, value in leaves(OmegaConf.to_container(cfg, resolve=True)).items()
            if not key.startswith(NOT_RESULT)
            and not (key.startswith("eval.callbacks.") and key.count(".") == 2 and value is None)}


def test_every_file_is_a_comparison_cell_an_unmeasured_paper_cell_or_a_published_configuration():
    cells = set(CELLS)
    assert cells <= set(NAMES), "a comparison cell without its experiment file"
    without_run = {cell["experiment"] for cell in TABLES if not cell["run"] and cell["note"]}  # a cell, and why
    assert set(NAMES) - cells - without_run - {n for n in NAMES if n.split("/")[0] in ("unmeasured", "published")} \
        == set(), ("a file without a kept run goes under unmeasured/, or its kept run into docs/results/"
                   "comparison.yaml (tables: tables.yaml)")
    assert {n for n in NAMES if n.startswith("published/")} == {f"published/{n}" for n in PUBLISHED}
    assert set(GPATE_PAPER) <= set(NAMES) and {n for n in NAMES if n.startswith("unmeasured/")} <= set(GPATE_PAPER)
    for name in NAMES:
        text = (EXPERIMENTS / f"{name}.yaml").read_text()
        assert text.startswith("# @package _global_\n"), name
        for run in re.findall(r"docs/results/([\w.-]*[\w-])", text):  # every kept run a file names exists
            assert (REPO / "docs/results" / run).is_dir(), (name, run)
    for name in PUBLISHED:  # each names the kept run that shows it does not learn
        assert "docs/results/" in (EXPERIMENTS / "published" / f"{name}.yaml").read_text(), name


@pytest.mark.parametrize("name", NAMES)
def test_every_file_composes_under_its_name(name):
    """`python train.py experiment=<name>` composes, and a cell's name says its method, data and budget."""
    cfg = compose_all(f"experiment={name}")
    if name.startswith("published/"):
        return
    method, cell = name.removeprefix("unmeasured/").split("/")
    assert cfg.method.name == method
    if math.isinf(cfg.privacy.epsilon):  # not private: no budget in the name
        assert cell == cfg.data.name
    else:
        # a variant of the method's cell names its option: _guide (method.module.guide), _marginals
        # (method.module.features with a marginals block), _relabel (method.module.relabel), _ablation_<name>
        assert re.fullmatch(rf"{cfg.data.name}_eps{float(cfg.privacy.epsilon):g}"
                            r"(_ablation_[\w.-]+|_guide|_marginals(_relabel)?)?", cell)
        assert cell.endswith("_guide") == bool(cfg.method.module.get("guide") is not None)
        assert cell.endswith("_relabel") == bool(cfg.method.module.get("relabel") is not None)
        kinds = [block["kind"] for block in (cfg.method.module.get("features") or [])]
        assert ("_marginals" in cell) == ("marginals" in kinds)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_every_comparison_cell_is_the_configuration_of_its_kept_run(name):
    """experiment=<cell> composes what its kept run recorded (docs/results/<run>/config.yaml), field for field,
    but for NOT_RESULT and the options added since (ADDED_SINCE, at the value that does what the run did)."""
    kept = OmegaConf.load(REPO / "docs/results" / CELLS[name] / "config.yaml")
    got, was = result_fields(compose_all(f"experiment={name}")), result_fields(kept)
    was.update({key: value for key, value in ADDED_SINCE.items() if key in got and key not in was})
    assert {k: (was.get(k), got.get(k)) for k in set(got) | set(was) if was.get(k, "absent") != got.get(k, "absent")
            } == {}


@pytest.mark.parametrize("name", GPATE_PAPER)
def test_every_gpate_paper_cell_builds_its_method(name):
    data = name.split("/")[-1].split("_eps")[0]
    cfg = composed(name, "method.n_teachers=2")
    assert cfg["method"]["name"] == "gpate" and cfg["data"]["name"] == data
    assert cfg["privacy"]["delta"] == 1e-5 and cfg["privacy"]["bound"] == "data_dependent"
    assert cfg["privacy"]["epsilon"] == float(name.split("_eps")[1].split("_")[0])
    shape = IMAGES.get(data, (29,))
    model = instantiate(cfg["method"]["module"], shape=shape, num_classes=CLASSES[data],
                        kind="table" if data == "kaggle_credit" else "image")
    assert model.ensemble.n_teachers == 2
    assert model.agg.smooth is None and model.ensemble.pool == 1  # the paper's Algorithm 2 and whole images


@pytest.mark.parametrize("data", ["mnist", "fashion_mnist"])
def test_ablations_and_table2_change_exactly_one_value_of_the_eps1_cell(data):
    base = flat(composed(f"gpate/{data}_eps1"))
    for ablation, (key, value) in ABLATIONS.items():
        cfg = flat(composed(f"unmeasured/gpate/{data}_eps1_ablation_{ablation}"))
        assert {k for k in base if base[k] != cfg[k]} == {key} and cfg[key] == value, ablation
    for eps in ("0.2", "0.4", "0.6", "0.8"):
        cfg = flat(composed(f"unmeasured/gpate/{data}_eps{eps}"))
        assert {k for k in base if base[k] != cfg[k]} == {"privacy.epsilon"}


def test_paper_settings_of_appendix_e():
    one, ten = composed("gpate/mnist_eps1")["method"], composed("gpate/fashion_mnist_eps10")["method"]
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
    cfg = composed("unmeasured/gpate/kaggle_credit_eps1")
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
    cfg = composed("published/dpgan_gpate_appendix")
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
    """experiment=published/gswgan_per_step (the default until 2026-12-01) is the one-draw-per-step configuration whose
    noise-free control is kept at 85.5%, with privacy on, eps = 10 and the noise that affords its 4,000 steps, and
    the configuration of the kept run of it with privacy on."""
    cfg = composed("published/gswgan_per_step")
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
    """experiment=published/gswgan_paper: the reference code's 1,000 critics of width 64, 2,000 warm-up iterations, one
    critic of 5 steps per step, Adam 1e-4, 20,000 steps, and the sound bound's noise 1.07 * sqrt(32)."""
    method = composed("published/gswgan_paper")["method"]
    module = method["module"]
    assert (method["max_steps"], method["batch_size"], method["epsilon"]) == (20000, 32, 1.0)
    assert (module["n_discriminators"], module["critics"]["model_dim"], module["pretrain"]["steps"]) == (1000, 64, 2000)
    assert (module["scheduled_critics"], module["scheduled_steps"], module["critic_steps"]) == (1, None, 5)
    assert (module["lr"], module["betas"], module["z_dim"]) == (1e-4, [0.5, 0.9], 10)
    assert module["sanitizer"] == {"clip": 1.0, "noise_multiplier": 6.05, "draw": "per_step"}  # one critic per step
    assert round(1.07 * 32 ** 0.5, 2) == 6.05


def test_pate_triplegan_default_is_the_kept_b512_run_and_the_paper_differs_in_its_dpsgd_batch():
    """PATE-TripleGAN's default is the configuration of the kept MNIST eps = 10 run at a DP-SGD batch of 512 (Poisson
    batches of 512 at noise 0.52, whose noise-free control reached 88.3%); experiment=published/pate_triplegan_paper
    differs from it in those two settings only: the paper's one batch of 128 (dpsgd_batch_size None) and noise 0.4."""
    cfg = composed_config("method=pate_triplegan")
    assert_method_is_kept(cfg, "pate_triplegan_mnist_eps10_b512", {"m.n_teachers", "m.module.seed"})
    got = flat(cfg["method"], "m.")
    assert (cfg["privacy"]["epsilon"], cfg["privacy"]["conversion"]) == (10.0, "pld")
    paper_method = composed("published/pate_triplegan_paper")["method"]
    paper = flat(paper_method, "m.")
    assert {k for k in paper if paper[k] != got[k]} == {"m.module.dpsgd_batch_size", "m.module.noise_multiplier"}
    assert (paper["m.module.dpsgd_batch_size"], paper["m.module.noise_multiplier"]) == (None, 0.4)
    assert (got["m.module.dpsgd_batch_size"], got["m.module.noise_multiplier"]) == (512, 0.52)
    model = instantiate(paper_method["module"], shape=IMAGES["mnist"], num_classes=10, kind="image", _convert_="all")
    assert (model.batch_size, model.dpsgd_batch_size, model.n_teachers) == (128, 128, 100)


@pytest.mark.parametrize("name, changed", [
    # 1,000 narrow teachers at vote noise 3,000, DP-SGD batch 1,024 at noise 1.5
    ("pate_triplegan/mnist_eps1", {"method.batch_size", "method.n_teachers", "method.module.n_teachers",
                                   "method.module.sigma1", "method.module.sigma2", "method.module.dpsgd_batch_size",
                                   "method.module.noise_multiplier", "method.module.teachers.channels",
                                   "method.module.teachers.hidden", "privacy.epsilon"}),
    # the drawn critics take no step of their own (the default: one); the default is the eps = 10 cell's budget
    ("gswgan/mnist_eps10", {"method.module.critic_steps"}),
    # Poisson batches of 1,024 at noise 3 (DP-CGAN's default noise is already 3)
    ("dpgan/mnist_eps1", {"method.batch_size", "method.module.batch_size", "method.module.noise_multiplier"}),
    ("dpgan/fashion_mnist_eps1", {"method.batch_size", "method.module.batch_size", "method.module.noise_multiplier",
                                  "data"}),
    ("dpcgan/mnist_eps1", {"method.batch_size", "method.module.batch_size"}),
    ("dpcgan/fashion_mnist_eps1", {"method.batch_size", "method.module.batch_size", "data"}),
])
def test_a_cell_differs_from_its_methods_default_in_the_settings_it_names(name, changed):
    """What sets a comparison cell apart from `method=<its method>` (the method and data sections)."""
    cfg = composed(name)
    default = composed_config(f"method={cfg['method']['name']}")
    got, was = leaves(cfg), leaves(default)
    differs = {k for k in set(got) | set(was) if got.get(k, "absent") != was.get(k, "absent")}
    assert {"data" if k.startswith("data.") else k for k in differs} == changed
    instantiate(cfg["method"]["module"], shape=IMAGES["mnist"], num_classes=10, kind="image", _convert_="all")
