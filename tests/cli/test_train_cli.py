"""train.py end to end (in the test's process, and as its own process where that is what is tested): every dataset
with the non-private GAN, and the clear errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from PIL import Image

from dpgen.callbacks import PrivacyBudget
from dpgen.callbacks.downstream import DownstreamUtility, EvaluationCallback
from dpgen.callbacks.privacy_budget import LEDGER_KEY
from dpgen.callbacks.sample_grid import SampleGrid
from dpgen.cli.common import CONF_DIR, check_config
from dpgen.cli.train import build_callbacks
from dpgen.data.mnist import FashionMNISTDataModule, MNISTDataModule
from dpgen.privacy.ledger import PrivacyLedger
from fixtures import installed_or_skip, write_celeba, write_credit, write_image_folder
from inprocess import train_here

REPO = Path(__file__).resolve().parents[2]
# A GAN small enough for a few CPU steps: the nets are the real ones, only narrower.
TINY_GAN = ["method=gan", "method.batch_size=8", "trainer.max_steps=3", "eval=none", "logger=csv",
            "samples.every_n_steps=2", "checkpoint_every_n_steps=2", "progress_log_every_seconds=0"]
NARROW_IMAGE_NETS = ["+method.module.generator.fc_dim=32", "+method.module.generator.start_channels=8"]
# G-PATE with 4 tiny teachers, 2 steps and the downstream evaluation only
TINY_GPATE = ["method=gpate", "method.n_teachers=4", "method.batch_size=4", "method.module.teachers.channels=[4,4]",
              "method.module.teachers.hidden=8", *NARROW_IMAGE_NETS, "trainer.max_steps=2", "logger=csv",
              "samples.every_n_steps=0", "checkpoint_every_n_steps=0", "progress_log_every_seconds=0",
              "~eval.callbacks.image_quality", "data=mnist"]

# Every private method as small as it goes (on `tiny_images`)
TINY_PRIVATE = {
    "gpate": ["method.n_teachers=2", "method.batch_size=2", "method.module.teachers.channels=[4,4]",
              "method.module.teachers.hidden=8", *NARROW_IMAGE_NETS],
    "pategan": ["method.n_teachers=2", "method.batch_size=4", "method.module.batch_size=4", *NARROW_IMAGE_NETS],
    "pate_triplegan": ["method.module.n_teachers=2", "method.module.percent=0.5", "method.batch_size=4",
                       "method.module.batch_size=4", *NARROW_IMAGE_NETS],
    "dpgan": [],
    "dpcgan": [],
    "gswgan": ["method.module.n_discriminators=2", "method.module.scheduled_critics=1",
               "method.module.critics.model_dim=4", "method.module.pretrain.steps=1"],
}


def train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """`python train.py hydra.run.dir=<tmp_path>/run *overrides` with an empty data root, in this process."""
    return train_here(tmp_path / "run", *overrides, data_root=tmp_path / "no-data-here")


def train_subprocess(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """The same command as its own process: the script file, the interpreter's exit status and output."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", DPGEN_DATA=str(tmp_path / "no-data-here"))
    cmd = [sys.executable, str(REPO / "train.py"), f"hydra.run.dir={tmp_path / 'run'}", *overrides]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def check_run(tmp_path: Path, result: subprocess.CompletedProcess, kind: str) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 3
    assert (run / "generator.pt").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / ".hydra" / "config.yaml").is_file()
    log = (run / "train.log").read_text()  # ProgressLog, every step here
    assert "step 1: " in log and "step 3: " in log and "training ended, step 3" in log
    if kind == "image":
        grid = Image.open(run / "samples" / "final.png")
        assert grid.size[0] > 0 and (run / "samples" / "step_0000002.png").is_file()
    else:
        lines = (run / "samples" / "final.csv").read_text().splitlines()
        assert lines[0].endswith(",label") and len(lines) > 1
    return metrics


@pytest.mark.parametrize("data, datamodule", [("mnist", MNISTDataModule), ("fashion_mnist", FashionMNISTDataModule)])
def test_gan_on_installed_image_data(tmp_path, data, datamodule):
    installed_or_skip(datamodule, tmp_path / "no-data-here")
    check_run(tmp_path, train(tmp_path, *TINY_GAN, *NARROW_IMAGE_NETS, f"data={data}"), "image")


@pytest.mark.parametrize("data", ["celeba_gender_s", "celeba_gender_l", "celeba_hair"])
def test_gan_on_celeba_layout(tmp_path, data):
    write_celeba(tmp_path)
    result = train(tmp_path, *TINY_GAN, *NARROW_IMAGE_NETS, f"data={data}", f"data.root={tmp_path}",
                   "data.check_hashes=false", "method.batch_size=2")
    check_run(tmp_path, result, "image")


def test_gan_on_kaggle_credit(tmp_path):
    write_credit(tmp_path, rows=200)
    check_run(tmp_path, train(tmp_path, *TINY_GAN, "data=kaggle_credit", f"data.root={tmp_path}"), "table")


def test_gan_on_user_csv(tmp_path):
    path = write_credit(tmp_path, rows=200)
    result = train(tmp_path, *TINY_GAN, "data=csv", f"data.path={path}", "data.label=Class", "data.classes=[0,1]")
    check_run(tmp_path, result, "table")


def test_gan_on_image_folder(tmp_path):
    root = write_image_folder(tmp_path / "faces", size=(28, 28), per_class=8)
    check_run(tmp_path, train(tmp_path, *TINY_GAN, *NARROW_IMAGE_NETS, "data=image_folder", f"data.path={root}",
                              "data.image_size=28", "data.channels=1"), "image")


def test_missing_data_is_one_clear_message(tmp_path):
    result = train(tmp_path, *TINY_GAN, "data=kaggle_credit", f"data.root={tmp_path / 'empty'}")
    assert result.returncode == 2
    assert "creditcard.csv" in result.stdout and "Looked in" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_unknown_config_name_is_one_line_listing_the_choices(tmp_path):
    result = train(tmp_path, "method=nosuchmethod")
    assert result.returncode == 2
    (line,) = result.stdout.strip().splitlines()
    assert line.startswith("error:") and "method/nosuchmethod" in line and "pate_triplegan" in line
    assert "HYDRA_FULL_ERROR" not in result.stdout + result.stderr


def test_a_value_the_method_refuses_is_one_line_naming_its_key(tmp_path):
    # its own process: all a user sees is that line (in this process, logging set up by earlier runs adds lines)
    result = train_subprocess(tmp_path, "method.module.aggregator.threshold=0", "trainer.max_steps=1", "eval=none")
    assert result.returncode == 2
    (line,) = result.stdout.strip().splitlines()
    assert line.startswith("error: method.module: threshold is a fraction of the teachers in (0, 1], got 0")
    assert "HYDRA_FULL_ERROR" not in result.stdout + result.stderr


@pytest.mark.parametrize("overrides, words", [
    (["data=csv", "data.path=x.csv"], "data.label must be given"),
    (["privacy.epsilonn=3"], "Key 'epsilonn' is not in struct"),
    (["method.batch_size=[1"], "method.batch_size=[1"),
    (["data=nosuchdata"], "choose one of: celeba, celeba_gender_l"),
])
def test_configuration_mistakes_are_one_line_naming_the_key(capsys, overrides, words):
    with pytest.raises(SystemExit) as stop:
        check_config("config", ["hydra.run.dir=/tmp/unused", *overrides])
    assert stop.value.code == 2
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("error:") and words in line


def test_a_correct_command_line_passes_the_check():
    check_config("config", ["hydra.run.dir=/tmp/unused", "method=pate_triplegan", "data=csv", "data.path=x.csv",
                            "data.label=y"])
    check_config("config", ["-m", "method=nosuch"])  # Hydra flags: left to Hydra


def test_wandb_logger_works_offline(tmp_path):
    result = train_subprocess(tmp_path, *TINY_GAN, *NARROW_IMAGE_NETS, "data=mnist", "logger=wandb")
    check_run(tmp_path, result, "image")
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].rglob("*.wandb"))


@pytest.mark.slow  # about 24 s: two training jobs
def test_multirun_sweep_writes_one_folder_per_job(tmp_path):
    for datamodule in (MNISTDataModule, FashionMNISTDataModule):  # the sweep reads both from this machine
        installed_or_skip(datamodule, tmp_path / "no-data-here")
    sweep = tmp_path / "sweep"
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(REPO / "train.py"), "-m", *TINY_GAN, *NARROW_IMAGE_NETS, "data=mnist,fashion_mnist",
           f"hydra.sweep.dir={sweep}"]
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["0_gan_mnist_epsinf", "1_gan_fashion_mnist_epsinf"]  # not private: eps = inf
    for job in jobs:
        assert json.loads((sweep / job / "metrics.json").read_text())["steps"] == 3
    # ... and python -m dpgen.report compares them (one row per job, plots written)
    report = subprocess.run([sys.executable, "-m", "dpgen.report", str(sweep)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    table = (sweep / "report.md").read_text()
    assert "| gan | fashion_mnist | none (not private) |" in table and "| gan | mnist | none (not private) |" in table
    assert (sweep / "utility_vs_epsilon.png").stat().st_size > 0 and (sweep / "samples.png").stat().st_size > 0


def test_a_rolled_back_step_is_not_counted_as_a_step_of_the_released_generator(tmp_path):
    # G-PATE's data-dependent cost is known only after a step: the step that crosses the budget runs, is rolled
    # back, and the released generator has one step fewer than the trainer ran (10 samples x k = 10 queries each)
    result = train(tmp_path, "method=gpate", "data=mnist", "method.n_teachers=20", "method.batch_size=10",
                   "method.module.aggregator.sigma1=100", "method.module.aggregator.sigma2=100", "privacy.epsilon=3",
                   "eval=none", "logger=none", "checkpoint_every_n_steps=1000")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    privacy = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert privacy["stop"]["discarded_steps"] == 1 and metrics["steps_run"] == metrics["steps"] + 1 >= 3
    assert privacy["mechanisms"]["confident_gnmax"]["count"] == metrics["steps"] * 10 * 10


def tiny_images(tmp_path: Path) -> list[str]:
    """Overrides for 16 grey 28x28 images in two classes (data=image_folder)."""
    root = write_image_folder(tmp_path / "images", size=(28, 28), per_class=8)
    return ["data=image_folder", f"data.path={root}", "data.image_size=28", "data.channels=1"]


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one `error:` line a run printed (ValueError if there are none or several)."""
    (line,) = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]
    return line


def nothing_released(folder: Path) -> bool:
    return not any((folder / name).exists() for name in ("generator.pt", "privacy.json", "metrics.json"))


@pytest.mark.parametrize("method", sorted(TINY_PRIVATE))
def test_a_budget_too_small_for_one_step_is_one_error_line_and_no_generator(tmp_path, method):
    # eps = 1e-4 is below what one step of any of them can cost here: refused before training (and before GS-WGAN
    # pretrains its critics), where G-PATE and PATE-GAN ran a step, rolled it back and released an untrained generator
    result = train(tmp_path, f"method={method}", *TINY_PRIVATE[method], *tiny_images(tmp_path), "eval=none",
                   "privacy.epsilon=0.0001")
    line = error_line(result)
    assert result.returncode == 2 and "privacy budget too small for one step" in line and "or more" in line
    assert nothing_released(tmp_path / "run") and not (tmp_path / "run" / "pretrained_critics.pt").exists()


def test_a_gswgan_run_reports_its_paper_bound_classically_beside_the_sound_pld(tmp_path):
    # GS-WGAN's default conversion is pld, which describes its sound bound only: metrics.json gives the paper's
    # bound by the classical conversion, as the planner prices it, and says which conversion each number used
    result = train(tmp_path, "method=gswgan", *TINY_PRIVATE["gswgan"], *tiny_images(tmp_path), "eval=none",
                   "privacy.epsilon=100", "method.max_steps=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    privacy = json.loads((tmp_path / "run" / "metrics.json").read_text())["privacy"]
    assert privacy["conversions"] == {"as_published": "classical", "sound": "pld"}
    total = json.loads((tmp_path / "run" / "privacy.json").read_text())["total"]
    assert privacy["epsilon"]["sound"] == total["sound"]["pld"]["epsilon"] < 100
    assert privacy["epsilon"]["as_published"] == total["as_published"]["classical"]["epsilon"]


def test_a_run_whose_only_step_is_rolled_back_is_one_error_line_and_no_generator(tmp_path):
    # the cheapest G-PATE step here (threshold checks only) costs eps 0.0368 <= 0.04, so the run starts; its first
    # step answers queries, costs more, and is rolled back: no step is left to release
    result = train(tmp_path, "method=gpate", *TINY_PRIVATE["gpate"], *tiny_images(tmp_path), "eval=none",
                   "privacy.epsilon=0.04")
    line = error_line(result)
    assert result.returncode == 2 and "no training step was released (budget: the last step" in line
    assert nothing_released(tmp_path / "run")


def test_the_default_method_with_a_budget_too_small_for_one_step_exits_2(tmp_path):
    # the command, `python train.py privacy.epsilon=0.0001`, with tiny teachers, in its own process
    result = train_subprocess(tmp_path, *TINY_GPATE, "privacy.epsilon=0.0001")
    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr, result.stdout[-3000:]
    assert "the cheapest training step costs epsilon=" in error_line(result) and nothing_released(tmp_path / "run")


def test_data_celeba_is_the_gender_s_setting(tmp_path):
    write_celeba(tmp_path)
    result = train(tmp_path, *TINY_GAN, *NARROW_IMAGE_NETS, "data=celeba", f"data.root={tmp_path}",
                   "data.check_hashes=false", "method.batch_size=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["data"] == "celeba_gender_s" and metrics["steps"] == 3
    released = torch.load(tmp_path / "run" / "generator.pt", weights_only=False)
    assert released["shape"] == [3, 32, 32] and released["class_names"] == ["female", "male"]


@pytest.mark.parametrize("log_private", [False, True])
def test_losses_on_private_records_stay_out_of_the_logs_unless_asked(tmp_path, log_private):
    result = train(tmp_path, "method=gpate", "data=mnist", "method.n_teachers=20", "method.batch_size=10",
                   "trainer.max_steps=2", "privacy.epsilon=1000", "eval=none", "logger=csv",
                   "progress_log_every_seconds=0", "trainer.log_every_n_steps=1",
                   f"log_private_losses={str(log_private).lower()}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = tmp_path / "run"
    header = next(run.rglob("metrics.csv")).read_text().splitlines()[0]
    log = (run / "train.log").read_text()
    metrics = json.loads((run / "metrics.json").read_text())
    privacy = json.loads((run / "privacy.json").read_text())
    assert "loss/g" in header and "loss/g" in metrics["losses"] and "answered" in log  # released quantities
    assert not any("teachers" in key for key in metrics["losses"])  # metrics.json: never
    assert ("private/loss/d_teachers" in header) == ("d_teachers" in log) == log_private
    assert ("private_logs" in privacy) == log_private
    assert privacy["neighbouring"]["relation"] == "add_remove" and "keyed hash" in privacy["neighbouring"]["note"]


def test_the_budget_judges_a_step_before_any_callback_writes_what_it_made(tmp_path):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["method=gpate"])
    callbacks = build_callbacks(cfg, tmp_path)
    budget = next(i for i, cb in enumerate(callbacks) if isinstance(cb, PrivacyBudget))
    writers = [i for i, cb in enumerate(callbacks) if isinstance(cb, (SampleGrid, EvaluationCallback))]
    assert len(writers) >= 2 and budget < min(writers)


def train_tiny_gpate_evaluated_by(tmp_path: Path, evaluate) -> subprocess.CompletedProcess:
    """The tiny G-PATE with DownstreamUtility.evaluate replaced by `evaluate(self, trainer, pl_module)`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DownstreamUtility, "evaluate", evaluate)
        return train(tmp_path, *TINY_GPATE)


def test_a_run_whose_evaluation_dies_keeps_its_generator_privacy_report_and_final_grid(tmp_path):
    def evaluate(self, trainer, pl_module):
        raise RuntimeError("evaluation died")

    result = train_tiny_gpate_evaluated_by(tmp_path, evaluate)
    assert result.returncode != 0 and "evaluation died" in result.stdout + result.stderr
    run = tmp_path / "run"
    assert not (run / "metrics.json").exists()  # the evaluation's results were never written
    assert (run / "generator.pt").is_file() and (run / "samples" / "final.png").is_file()
    privacy = json.loads((run / "privacy.json").read_text())
    assert privacy["stop"]["reason"] == "trainer limits reached within the budget" and privacy["epsilon"] > 0


def test_the_teachers_are_checkpointed_then_freed_before_the_evaluation(tmp_path):
    # checkpoint_every_n_steps=0 (TINY_GPATE): the only checkpoint is the one written when training ends
    result = train_tiny_gpate_evaluated_by(
        tmp_path, lambda self, trainer, pl_module: {"teachers_held": float(pl_module.ensemble is not None)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = tmp_path / "run"
    assert json.loads((run / "metrics.json").read_text())["downstream"]["teachers_held"] == 0.0
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert state["global_step"] == 2 and state["state_dict"]["ensemble.params.fc_weight"].shape[0] == 4


def test_the_final_checkpoint_holds_the_last_step_when_an_earlier_one_was_written(tmp_path):
    # a checkpoint at step 2 of 3: resuming from it would redo step 3, whose generator the run released,
    # without its privacy cost in the ledger
    overrides = [o for o in TINY_GPATE if not o.startswith(("trainer.max_steps", "checkpoint_every_n_steps"))]
    result = train(tmp_path, *overrides, "trainer.max_steps=3", "checkpoint_every_n_steps=2", "~eval.callbacks.downstream")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = tmp_path / "run"
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert state["global_step"] == 3 and state["state_dict"]["ensemble.params.fc_weight"].shape[0] == 4
    ledger = PrivacyLedger()
    ledger.load_state_dict(state[LEDGER_KEY])
    privacy = json.loads((run / "privacy.json").read_text())
    assert privacy["epsilon"] > 0
    assert ledger.epsilon(privacy["delta"], bound=privacy["governing_bound"])[0] == privacy["epsilon"]


def test_a_resumed_run_keeps_the_csv_log_of_its_first_process(tmp_path):
    first = train(tmp_path, *TINY_GAN, *NARROW_IMAGE_NETS, "data=mnist", "trainer.log_every_n_steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "run"
    resumed = train(tmp_path, *TINY_GAN, *NARROW_IMAGE_NETS, "data=mnist", "trainer.log_every_n_steps=1",
                    "trainer.max_steps=5",
                    f"resume={run / 'checkpoints' / 'last.ckpt'}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    logs = sorted(run.glob("logs/version_*/metrics.csv"))
    assert [p.parent.name for p in logs] == ["version_0", "version_1"]
    assert all(len(p.read_text().splitlines()) > 1 for p in logs)


def test_lightning_warnings_that_need_no_action_are_not_printed():
    import warnings

    from dpgen.cli.train import quiet_known_warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_known_warnings()
        warnings.warn("The number of training batches (4) is smaller than the logging interval Trainer(...)")
        warnings.warn("Using ModelCheckpoint with manual optimization and every_n_train_steps, but no ...")
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use ...", DeprecationWarning)
        warnings.warn("any other warning")
    assert [str(w.message) for w in caught] == ["any other warning"]


def test_a_run_writes_privacy_json_saying_there_is_no_guarantee(tmp_path):
    result = train_here(tmp_path / "run", "method=pategan_2018_code", "data=mnist", "privacy.epsilon=10",
                        "method.batch_size=8", "method.module.batch_size=4", "method.module.critic_steps=2",
                        "method.module.hidden=8", "trainer.max_steps=2", "eval=none", "samples.every_n_steps=0",
                        "checkpoint_every_n_steps=0", "progress_log_every_seconds=0",
                        data_root=tmp_path / "no-data-here")
    assert result.returncode == 0, result.stderr[-2000:]
    privacy = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert privacy["private"] is False and privacy["guarantee"] == "none"
    assert privacy["claimed_epsilon"] == 10.0
    assert privacy["label_noise"] == pytest.approx(0.242124, abs=1e-6)  # 2.4212 / 10: the code's formula
    assert "No differential privacy guarantee" in privacy["caveats"][0]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["privacy"] == privacy
