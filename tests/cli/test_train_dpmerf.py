"""train.py method=dpmerf end to end (in the test's process): the run's files, its privacy report, generate.py."""
import json

import numpy as np
import pytest
import torch

from dpgen.aggregation import mean_embedding
from dpgen.aggregation.mean_embedding import MECHANISM
from inprocess import script_here
from test_train_cli import tiny_images, train

TINY_DPMERF = ["method=dpmerf", "method.batch_size=8", "method.module.n_features=100", "trainer.max_steps=3",
               "eval=none", "samples.every_n_steps=2", "checkpoint_every_n_steps=2", "progress_log_every_seconds=0"]


@pytest.mark.parametrize("conversion", [None, "classical"])
def test_a_tiny_run_writes_its_files_and_reports_the_budget(tmp_path, conversion):
    overrides = [] if conversion is None else [f"privacy.conversion={conversion}"]
    result = train(tmp_path, *TINY_DPMERF, *tiny_images(tmp_path), "privacy.epsilon=2", *overrides)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = tmp_path / "run"
    assert (run / "generator.pt").is_file() and (run / "samples" / "final.png").is_file()
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["method"] == "dpmerf" and metrics["steps"] == 3
    privacy = json.loads((run / "privacy.json").read_text())
    assert privacy["conversion"] == (conversion or "gdp")  # the method's default: exact for its one release
    assert 2.0 * (1 - 1e-6) <= privacy["epsilon"] <= 2.0
    assert list(privacy["mechanisms"]) == [MECHANISM] and privacy["mechanisms"][MECHANISM]["count"] == 1
    assert privacy["stop"] == {"reason": "trainer limits reached within the budget", "discarded_steps": 0}
    if conversion is None:
        result = script_here("generate.py", f"run={run}", "n=10", "format=npz", cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        with np.load(run / "synthetic" / "synthetic.npz") as f:
            assert f["x"].shape == (10, 1, 28, 28) and 0 <= f["x"].min() and f["x"].max() <= 1


def test_a_resumed_run_keeps_its_release(tmp_path, monkeypatch):
    images = tiny_images(tmp_path)
    assert train(tmp_path, *TINY_DPMERF, *images).returncode == 0
    run = tmp_path / "run"
    first = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    monkeypatch.setattr(mean_embedding, "embedding_sums", None)  # a second pass over the data would fail
    result = train(tmp_path, *TINY_DPMERF, *images, "trainer.max_steps=5",
                   f"resume={run / 'checkpoints' / 'last.ckpt'}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    privacy = json.loads((run / "privacy.json").read_text())
    assert privacy["mechanisms"][MECHANISM]["count"] == 1 and privacy["epsilon"] <= 1.0
    assert json.loads((run / "metrics.json").read_text())["steps"] == 5
    resumed = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert torch.equal(first["state_dict"]["target"], resumed["state_dict"]["target"])
