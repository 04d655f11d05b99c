"""python -m dpgen.report: markdown table and PNG plots from run folders (dpgen.cli.report)."""
import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from dpgen.cli.report import main


def fake_run(root, method, data, eps, metrics):
    run = root / f"{method}_{data}_{eps}"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        f"method:\n  name: {method}\ndata:\n  name: {data}\nprivacy:\n  epsilon: {eps}\n")
    (run / "samples").mkdir()
    plt.imsave(run / "samples" / "final.png", np.random.default_rng(0).random((28, 28)), cmap="gray")
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


def private(eps, accuracy, spent):
    return {"steps": 10, "wall_time_s": 12.5, "privacy": {"private": True, "epsilon": {"data_dependent": spent}},
            "downstream": {"accuracy": accuracy}, "image_quality": {"IS": 2.0, "FID": 100.0}}


def test_table_and_plots_of_a_sweep(tmp_path):
    sweep = tmp_path / "multirun"
    fake_run(sweep, "gpate", "mnist", 1.0, private(1.0, 0.5, 0.99))
    fake_run(sweep, "gpate", "mnist", 10.0, private(10.0, 0.8, 9.9))
    fake_run(sweep, "gan", "mnist", "inf", {"steps": 5, "wall_time_s": 1.0, "privacy": {"private": False},
                                            "downstream": {"accuracy": 0.95}})
    fake_run(sweep, "pategan", "kaggle_credit", 1.0, {"privacy": {"private": True, "epsilon": {"data_dependent": 1}},
                                                       "downstream": {"average": {"auroc": 0.9, "auprc": 0.4}}})
    (sweep / "unfinished" / ".hydra").mkdir(parents=True)  # no metrics.json: not a row
    out = main([str(sweep)])
    table = (out / "report.md").read_text()
    assert "Runs compared (4)" in table
    rows = [line for line in table.splitlines() if line.startswith("| gpate")]
    assert len(rows) == 2 and "| 1 | 0.5 |" in rows[0] and "| 10 | 0.8 |" in rows[1] and "0.99" in rows[0]
    assert "| gan | mnist | none (not private) | 0.95 |" in table
    assert "| pategan | kaggle_credit | 1 |  | 0.4 | 0.9 |" in table  # columns accuracy, auprc, auroc
    for name in ("utility_vs_epsilon.png", "samples.png"):
        with Image.open(out / name) as image:
            assert image.size[0] > 300 and image.size[1] > 200


def test_missing_folder_and_no_runs_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run"):
        main([str(tmp_path / "nothing")])
    with pytest.raises(FileNotFoundError, match="no finished runs"):
        main([str(tmp_path)])
