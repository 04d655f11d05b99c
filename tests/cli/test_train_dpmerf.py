"""train.py method=dpmerf end to end (in the test's process): the run's files, its privacy report, generate.py."""
import json

import numpy as np
import pytest
import torch

from dpgen.aggregation import mean_embedding
from dpgen.aggregation.mean_embedding import MECHANISM
from dpgen.privacy.rdp import check_delta_for_size
from fixtures import write_credit
from inprocess import script_here
from test_private_val_cli import SMALL_EVAL
from test_train_cli import error_line, tiny_images, train

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


def test_a_run_ends_with_a_short_summary(tmp_path):
    """The lines train.py prints last: the accuracy under each selection, the privacy spent and its kind, the wall
    time and where the files are."""
    tiny = [option for option in TINY_DPMERF if option != "eval=none"]
    result = train(tmp_path, *tiny, *tiny_images(tmp_path), "privacy.epsilon=2", *SMALL_EVAL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = tmp_path / "run"
    lines = result.stdout.splitlines()
    rows = {label: value.strip() for label, value in
            (line.strip().split(":  ", 1) for line in lines[lines.index("dpmerf on image_folder:") + 1:])}
    downstream = json.loads((run / "metrics.json").read_text())["downstream"]
    for key, label in (("private_val", "DP selection (private validation split)"),
                       ("synthetic", "synthetic hold-out selection")):
        chosen = downstream[key]
        assert rows[f"accuracy, {label}"] == f"{chosen['accuracy']:.1%} (classifier epoch {chosen['epoch']})"
    assert rows["privacy spent"] == "eps 2 at delta 1e-05 (the generator and the DP selection together)"
    assert rows["guarantee"] == "DP" and rows["wall time"].split(": ")[1].startswith("3 steps and the evaluation")
    assert (rows["run folder"], rows["samples"]) == (str(run), str(run / "samples" / "final.png"))
    assert rows["generator"] == str(run / "generator.pt") and len(rows) == 8


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


def test_a_resume_that_would_hold_out_a_split_the_generator_read_is_refused(tmp_path):
    """The run's one release read every training record: resumed with eval.selection=private_val, its selections
    would claim a split disjoint from the generator's data. Refused, and so is a resume with another split."""
    images = tiny_images(tmp_path)
    assert train(tmp_path, *TINY_DPMERF, *images).returncode == 0
    held_out = ["eval=default", "eval.selection=private_val", "eval.private_val.fraction=0.4",
                "~eval.callbacks.image_quality", "eval.callbacks.downstream.max_epochs=1"]
    resume = f"resume={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}"
    result = train(tmp_path, *TINY_DPMERF, *images, *held_out, "trainer.max_steps=5", resume)
    assert result.returncode == 2 and "held out no private validation split" in error_line(result)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["steps"] == 3  # nothing was trained on


def test_a_delta_that_protects_no_one_is_refused_unless_insisted_on(tmp_path):
    images = tiny_images(tmp_path)  # at most 16 training records: 1/N >= 0.0625
    result = train(tmp_path, *TINY_DPMERF, *images, "privacy.delta=0.5")
    assert result.returncode == 2 and "privacy.delta=0.5 is not below 1/N" in error_line(result)
    assert "1e-5 for 60,000 records" in error_line(result) and not (tmp_path / "run" / "privacy.json").exists()
    result = train(tmp_path, *TINY_DPMERF, *images, "privacy.delta=0.5", "privacy.allow_large_delta=true")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    caveats = json.loads((tmp_path / "run" / "privacy.json").read_text())["caveats"]
    assert any("allow_large_delta=true" in c for c in caveats)


def test_delta_is_checked_against_one_over_the_number_of_records():
    check_delta_for_size(1e-5, 60_000)  # the usual choice: 0.6 / N
    check_delta_for_size(0.0099, 100)
    for delta, n in [(0.01, 100), (1e-5, 100_000), (0.5, 16)]:
        with pytest.raises(ValueError, match="not below 1/N"):
            check_delta_for_size(delta, n)


# Tables: the downstream AUROC / AUPRC evaluation on (few) samples of the released generator
TABLE_EVAL = ["~eval.callbacks.image_quality", "eval.callbacks.downstream.n_samples=200"]


def check_table_run(tmp_path, result, epsilon: float) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = tmp_path / "run"
    privacy = json.loads((run / "privacy.json").read_text())
    assert epsilon * (1 - 1e-6) <= privacy["epsilon"] <= epsilon
    assert list(privacy["mechanisms"]) == [MECHANISM] and privacy["mechanisms"][MECHANISM]["count"] == 1
    scores = json.loads((run / "metrics.json").read_text())["downstream"]
    assert set(scores) >= {"logistic_regression", "average"} and 0 <= scores["average"]["auroc"] <= 1
    return privacy["mechanisms"][MECHANISM]["params"][0]


def test_kaggle_credit_stand_in_end_to_end(tmp_path):
    write_credit(tmp_path, rows=200)  # creditcard.csv in Kaggle's layout: 29 features, fraud when row % 5 == 0
    result = train(tmp_path, *TINY_DPMERF, "eval=default", *TABLE_EVAL, "data=kaggle_credit", f"data.root={tmp_path}")
    params = check_table_run(tmp_path, result, 1.0)
    assert params["bandwidth"] == pytest.approx(0.2 * 29**0.5)  # the public default for 29 columns on [0, 1]
    header = (tmp_path / "run" / "samples" / "final.csv").read_text().splitlines()[0]
    assert header.startswith("V1,V2,") and header.endswith("Amount,label")


def mixed_csv(folder) -> str:
    """1000 rows: age 20..79, target = age >= 50 (class means of age / 100: 0.345 and 0.645); colour mostly
    evenly spread, red for class 0 and blue for class 1 in every fifth row."""
    rows = []
    for r in range(1000):
        age = 20 + (r * 37) % 60
        target = int(age >= 50)
        rows.append(f"{age},{('red', 'green', 'blue')[r % 3 if r % 5 else 2 * target]},{target}\n")
    (folder / "mixed.csv").write_text("age,colour,target\n" + "".join(rows))
    return f"data.path={folder / 'mixed.csv'}"


CSV_DATA = ["data=csv", "data.label=target", "data.classes=[0,1]", "data.ranges={age:[0,100]}"]


def test_a_csv_with_a_categorical_column_learns_at_epsilon_1(tmp_path):
    result = train(tmp_path, *TINY_DPMERF, "eval=default", *TABLE_EVAL, *CSV_DATA, mixed_csv(tmp_path),
                   "data.categorical={colour:[red,green,blue]}", "method.batch_size=64", "method.module.n_features=500",
                   "trainer.max_steps=200")
    check_table_run(tmp_path, result, 1.0)
    run = tmp_path / "run"
    auroc = json.loads((run / "metrics.json").read_text())["downstream"]["average"]["auroc"]
    assert auroc > 0.9  # measured 0.983: trained on samples, tested on the real test split
    result = script_here("generate.py", f"run={run}", "n=400", "format=csv", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = (run / "synthetic" / "synthetic.csv").read_text().splitlines()
    assert lines[0] == "age,colour,target" and len(lines) == 401  # the file's own columns, in its units
    rows = [line.split(",") for line in lines[1:]]
    assert {colour for _, colour, _ in rows} <= {"red", "green", "blue"} and {t for *_, t in rows} <= {"0", "1"}
    for c, truth in (("0", 34.5), ("1", 64.5)):  # the generated class means of age near the data's
        ages = [float(age) for age, _, target in rows if target == c]
        assert abs(sum(ages) / len(ages) - truth) < 8


@pytest.mark.parametrize("categorical, words", [
    ("{shade:[a,b]}", "categorical column(s) ['shade'] are not among the features ['age', 'colour']"),
    ("{colour:[red,green]}", "categorical column 'colour' has value 'blue' at line 4, not one of its configured"),
])
def test_a_bad_categorical_config_is_one_error_line(tmp_path, categorical, words):
    result = train(tmp_path, *TINY_DPMERF, *CSV_DATA, mixed_csv(tmp_path), f"data.categorical={categorical}")
    assert result.returncode == 2 and words in error_line(result)
