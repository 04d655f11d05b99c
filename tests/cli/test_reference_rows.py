"""`python -m dpgen.cli.reference_rows`: the real-data reference rows, on a small subset of MNIST."""
import json

from dpgen.cli import reference_rows


def test_reference_rows_on_a_subset_write_every_number_and_cache_nothing(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DPGEN_CACHE", str(cache))
    rows = reference_rows.main(["--datasets", "mnist", "--limit", "300", "--max-epochs", "1",
                                "--out", str(tmp_path / "rows.json")])
    assert json.loads(json.dumps(rows)) == json.loads((tmp_path / "rows.json").read_text())
    (row,) = rows
    assert row["dataset"] == "mnist" and row["cnn_on_real"]["epochs_run"] == 1
    assert 0.0 <= row["classifier"]["test_accuracy"] <= 1.0 and 0.0 <= row["cnn_on_real"]["accuracy"] <= 1.0
    assert 1.0 <= row["real_test_IS"] <= 10.0  # IS of 10 classes lies in [1, 10]
    assert row["real_test_vs_train_FID"] >= 0.0
    assert row["classifier"]["path"] is None and not list((cache / "classifiers").glob("*.pt"))  # the subset's classifier is not cached as MNIST's
