"""generate.py format=csv of a table: the columns, units, categories and labels of the original file; evaluate.py
reads such a file back, and the real training file itself (the real-data row)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from inprocess import script_here, train_here
from test_train_cli import TINY_GAN

COLOURS = ["red", "green", "blue"]
# a stand-in table: two continuous columns around a categorical one, a text label; the label follows `size`
ROWS = "".join(f"{20 + r % 50},{COLOURS[r % 3]},{r % 20 * 0.5},{'yes' if r % 20 >= 10 else 'no'}\n" for r in range(120))
DATA = ["data=csv", "data.path=t.csv", "data.label=y", "data.classes=[no,yes]", "data.features=[age,colour,size]",
        "+data.categorical={colour:[red,green,blue]}", "data.ranges={age:[0,100],size:[0,20]}"]
FAST_EVAL = ["~eval.callbacks.image_quality"]


def test_generated_csv_has_the_files_columns_and_evaluates(tmp_path):
    (tmp_path / "t.csv").write_text("age,colour,size,y\n" + ROWS)
    result = train_here(tmp_path / "run", *TINY_GAN, *DATA, data_root=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    run = tmp_path / "run"
    result = script_here("generate.py", f"run={run}", "n=50", "format=csv", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    frame = pd.read_csv(run / "synthetic" / "synthetic.csv")
    assert list(frame.columns) == ["age", "colour", "size", "y"] and len(frame) == 50
    assert set(frame.colour) <= set(COLOURS) and set(frame.y) <= {"no", "yes"}
    assert frame.age.between(0, 100).all() and frame["size"].between(0, 20).all()  # in units, not [0, 1]
    # the same records as the npz of the same seed, decoded
    script_here("generate.py", f"run={run}", "n=50", "format=npz", cwd=tmp_path)
    with np.load(run / "synthetic" / "synthetic.npz") as f:
        assert np.allclose(frame.age, f["x"][:, 0] * 100, atol=1e-3)
        assert (frame.y == np.array(["no", "yes"])[f["y"]]).all()

    report = evaluate(tmp_path, run / "synthetic" / "synthetic.csv")
    assert report["records"] == 50 and 0 <= report["downstream"]["average"]["auroc"] <= 1


def evaluate(tmp_path, synthetic) -> dict:
    result = script_here("evaluate.py", f"synthetic={synthetic}", *DATA, "data.root=.", f"out={tmp_path / 'eval.json'}",
                         *FAST_EVAL, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((tmp_path / "eval.json").read_text())


def test_the_real_training_file_evaluates_as_the_real_data_row(tmp_path):
    """evaluate.py on a file in the table's own layout: here the real file itself, all 120 rows, tested on its own
    test split (so above the real-data row's honest value: the test rows are among the training rows)."""
    (tmp_path / "t.csv").write_text("age,colour,size,y\n" + ROWS)
    report = evaluate(tmp_path, tmp_path / "t.csv")
    assert report["records"] == 120 and report["downstream"]["average"]["auroc"] > 0.9  # the label follows size


def test_a_kept_runs_config_serves_and_without_one_the_encoded_columns_are_written(tmp_path):
    (tmp_path / "t.csv").write_text("age,colour,size,y\n" + ROWS)
    assert train_here(tmp_path / "run", *TINY_GAN, *DATA, data_root=tmp_path).returncode == 0
    run = tmp_path / "run"
    (run / ".hydra" / "config.yaml").rename(run / "config.yaml")  # where python -m dpgen.report --keep puts it
    assert script_here("generate.py", f"run={run}", "n=5", "format=csv", cwd=tmp_path).returncode == 0
    assert (run / "synthetic" / "synthetic.csv").read_text().splitlines()[0] == "age,colour,size,y"
    (run / "config.yaml").unlink()
    result = script_here("generate.py", f"run={run}", "n=5", "format=csv", cwd=tmp_path)
    assert result.returncode == 0 and "encoded columns" in result.stdout
    header = (run / "synthetic" / "synthetic.csv").read_text().splitlines()[0]
    assert header == "age,size,colour=red,colour=green,colour=blue,label"
