"""generate.py and evaluate.py end to end: a tiny trained run -> synthetic files -> their evaluation."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from fixtures import write_credit
from inprocess import script_here
from test_train_cli import NARROW_IMAGE_NETS, REPO, TINY_GAN, train

FAST_EVAL = ["~eval.callbacks.image_quality", "eval.callbacks.downstream.max_epochs=1"]


def script(name: str, tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / name), *overrides], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.mark.slow  # about 45 s: trains, exports three formats, evaluates
def test_generate_all_formats_then_evaluate_images(tmp_path):
    assert train(tmp_path, *TINY_GAN, *NARROW_IMAGE_NETS, "data=mnist").returncode == 0
    run = tmp_path / "run"
    for fmt in ("npz", "csv", "png"):
        result = script("generate.py", tmp_path, f"run={run}", "n=30", f"format={fmt}")
        assert result.returncode == 0, result.stdout + result.stderr
    with np.load(run / "synthetic" / "synthetic.npz") as f:
        assert f["x"].shape == (30, 1, 28, 28) and f["y"].tolist() == [i % 10 for i in range(30)]
        assert 0 <= f["x"].min() and f["x"].max() <= 1
    lines = (run / "synthetic" / "synthetic.csv").read_text().splitlines()
    assert len(lines) == 31 and lines[0].endswith(",label") and len(lines[1].split(",")) == 785
    pngs = sorted((run / "synthetic" / "images").glob("*/*.png"))
    assert len(pngs) == 30 and Image.open(pngs[0]).size == (28, 28)

    result = script("evaluate.py", tmp_path, f"synthetic={run / 'synthetic' / 'synthetic.npz'}", "data=mnist",
                    *FAST_EVAL)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((run / "synthetic" / "synthetic.eval.json").read_text())
    assert report["records"] == 30 and 0 <= report["downstream"]["accuracy"] <= 1


@pytest.mark.slow  # about 22 s
def test_evaluate_a_table_from_csv(tmp_path):
    write_credit(tmp_path, rows=200)
    assert train(tmp_path, *TINY_GAN, "data=kaggle_credit", f"data.root={tmp_path}").returncode == 0
    run = tmp_path / "run"
    assert script("generate.py", tmp_path, f"run={run}", "n=200", "format=csv").returncode == 0
    result = script("evaluate.py", tmp_path, f"synthetic={run / 'synthetic' / 'synthetic.csv'}", "data=kaggle_credit",
                    f"data.root={tmp_path}", *FAST_EVAL)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((run / "synthetic" / "synthetic.eval.json").read_text())
    assert set(report["downstream"]) >= {"average"}


def test_clear_errors(tmp_path):
    result = script("generate.py", tmp_path, f"run={tmp_path / 'nothing'}")  # the script file itself
    assert result.returncode == 2 and "generator.pt" in result.stdout and "Traceback" not in result.stderr
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((4, 5)), y=np.zeros(4))
    result = script_here("evaluate.py", f"synthetic={bad}", "data=mnist", *FAST_EVAL, cwd=tmp_path)
    assert result.returncode == 2 and "shape" in result.stdout


def test_evaluate_keeps_the_classifiers_training_state_beside_its_output(tmp_path):
    """evaluate.py continues a killed evaluation from `<out>.downstream-state.pt`: a state file of another
    training there is refused by name, and a finished evaluation leaves none behind."""
    import torch

    synthetic = tmp_path / "synthetic.npz"
    np.savez(synthetic, x=np.random.default_rng(0).random((40, 1, 28, 28), dtype=np.float32), y=np.arange(40) % 10)
    state = tmp_path / "synthetic.eval.json.downstream-state.pt"
    torch.save({"key": "another training"}, state)
    result = script_here("evaluate.py", f"synthetic={synthetic}", "data=mnist", *FAST_EVAL, cwd=tmp_path)
    assert result.returncode == 2 and "holds a classifier training" in result.stdout and str(state) in result.stdout
    state.unlink()
    result = script_here("evaluate.py", f"synthetic={synthetic}", "data=mnist", *FAST_EVAL, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "synthetic.eval.json").is_file() and not state.exists()
    settings = json.loads((tmp_path / "synthetic.eval.json").read_text())["downstream"]["settings"]
    assert {key: settings[key] for key in ("n_samples", "max_epochs", "cnn", "repeats")} == {
        "n_samples": 40, "max_epochs": 1, "cnn": "appendix_e", "repeats": 1}  # the file's records, not the config's


def test_a_release_with_a_labeller_labels_its_samples_by_it():
    """DP-MERF's guide in mode=relabel travels in generator.pt as `labeller`: generate.py's labels are its classes,
    whatever labels the generator was asked for."""
    import torch
    from torch import nn

    from dpgen.cli.generate import sample

    class Bright(nn.Module):  # class 1 for a sample brighter than 0.5 on average
        def forward(self, x):
            high = (x.flatten(1).mean(1) > 0.5).float()
            return torch.stack([1 - high, high], 1)

    class Noise(nn.Module):
        def __init__(self):
            super().__init__()
            self.unused = nn.Parameter(torch.zeros(1))  # generate() reads the device off a parameter

        def forward(self, z, y):
            return torch.sigmoid(z[:, :1, None, None] * 4).expand(-1, 1, 4, 4)

    release = {"generator": Noise(), "z_dim": 2, "latent_dist": "normal", "class_probs": None, "num_classes": 2}
    x, y = sample(release, 500, seed=0, batch_size=128)
    assert torch.equal(y, torch.arange(500) % 2)  # no labeller: the labels asked for
    x, y = sample({**release, "labeller": Bright()}, 500, seed=0, batch_size=128)
    assert torch.equal(y, (x.flatten(1).mean(1) > 0.5).long()) and 0 < y.sum() < 500

    class Brightness(nn.Module):  # graded: the brighter, the likelier class 1
        def forward(self, x):
            return torch.stack([torch.zeros(len(x)), x.flatten(1).mean(1)], 1)

    # with labeller_shares (guide.rule=shares): the release's shares, the brightest samples class 1
    x, y = sample({**release, "labeller": Brightness(), "labeller_shares": [0.9, 0.1]}, 500, seed=0, batch_size=128)
    bright = x.flatten(1).mean(1)
    assert int(y.sum()) == 50 and bright[y == 1].min() >= bright[y == 0].max()


def test_a_labeller_that_still_holds_dpsgd_gradients_is_refused(tmp_path):
    """A guide pickled with Opacus' per-record gradients on its parameters (generator.pt of a guided run before the
    fix) holds private records: generate.py and `--keep` refuse to read it; the same file without them loads."""
    import torch
    from torch import nn

    from dpgen.cli.generate import load_release
    from dpgen.cli.report import keep_generator

    guide = nn.Linear(3, 2)
    guide.weight.grad_sample = torch.randn(5, 2, 3)  # what Opacus leaves: one gradient per record of the batch
    torch.save({"generator": nn.Linear(2, 3), "labeller": guide}, tmp_path / "generator.pt")
    with pytest.raises(ValueError, match="private records"):
        load_release(tmp_path)
    with pytest.raises(ValueError, match="private records"):
        keep_generator(tmp_path / "generator.pt", tmp_path / "kept.pt")
    # mode=filter: the guide travels inside the generator (GuidedGenerator)
    torch.save({"generator": nn.Sequential(nn.Linear(2, 3), guide)}, tmp_path / "generator.pt")
    with pytest.raises(ValueError, match="private records"):
        load_release(tmp_path)
    del guide.weight.grad_sample
    torch.save({"generator": nn.Linear(2, 3), "labeller": guide}, tmp_path / "generator.pt")
    assert torch.equal(load_release(tmp_path)["labeller"].weight, guide.weight)
