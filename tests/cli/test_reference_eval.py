"""`python -m dpgen.reference_eval`: a released G-PATE generator sampled as its authors sample it, scored with their
evaluation's settings, shortened only into a folder of its own."""
import json
import logging

import pytest

from dpgen.cli import reference_eval
from dpgen.cli.generate import sample
from dpgen.cli.reference_eval import authors_settings, main
from dpgen.evaluation import stacked, training
from test_train_cli import TINY_GPATE, train


def test_a_tiny_gpate_run_scored_by_the_authors_evaluation(tmp_path, monkeypatch, caplog):
    """Refused when shortened without --out; cut off after an epoch and continued from its state with samples that
    differ in their last bits (drawn again on another machine), to a full history with the machines it ran on."""
    overrides = [o for o in TINY_GPATE if not o.startswith("~eval")] + ["eval=none"]
    assert train(tmp_path, *overrides).returncode == 0
    run, out = tmp_path / "run", tmp_path / "check"
    with pytest.raises(SystemExit) as refused:  # a shortened evaluation never lands in the run as the authors'
        main([str(run), "--epochs", "1"])
    assert refused.value.code == 2 and not (run / "eval_reference.json").exists()
    args = [str(run), "--epochs", "2", "--n-samples", "30", "--out", str(out), "--state", str(tmp_path / "state.pt"),
            "--device", "cpu"]
    save = training.Resumable.save

    def save_then_die(self, *saved):
        save(self, *saved)
        raise KeyboardInterrupt

    monkeypatch.setattr(training.Resumable, "save", save_then_die)
    monkeypatch.setattr(reference_eval, "machine", lambda where: "machine A")
    with pytest.raises(KeyboardInterrupt):  # cut off after its first epoch
        main(args)
    monkeypatch.setattr(training.Resumable, "save", save)
    # continued where the samples, drawn again (as on another machine), differ in their last bits
    def resampled(*args, **kwargs):
        x, y = sample(*args, **kwargs)
        return x * (1 + 1e-7), y

    monkeypatch.setattr(reference_eval, "sample", resampled)
    monkeypatch.setattr(reference_eval, "machine", lambda where: "machine B")
    with caplog.at_level(logging.INFO):
        [result] = main(args)
    assert "resumed after epoch 1" in caplog.text
    assert "stacked classifiers: epoch 2/2, test accuracy" in caplog.text  # progress, one line an epoch
    shown = logging.getLogger("dpgen.evaluation.stacked").isEnabledFor(logging.INFO)  # outside caplog's level too
    logging.getLogger("dpgen").setLevel(logging.NOTSET)
    assert shown
    written = json.loads((out / "run.json").read_text())
    assert written["epochs_by_machine"] == {"machine A": 1, "machine B": 1} and written["seconds_per_cell"] > 0
    assert written == json.loads(json.dumps(result))
    # the authors' MNIST script's learning rate and batch; G-PATE's samples with BatchNorm on batches of its
    # training batch (method.batch_size=4 here)
    assert written["settings"] == {"n_samples": 30, "max_epochs": 2, "batch_size": 512, "lr": 1e-3,
                                   "cnn": "reference_script", "seed": 0}
    assert "BatchNorm on batches of 4 samples" in written["synthetic"]
    history = written["downstream"]["history"]
    assert [r["epoch"] for r in history] == [1, 2] and not (tmp_path / "state.pt").exists()
    best = max(r["test_accuracy"] for r in history)
    assert written["downstream"]["max_test_accuracy"] == pytest.approx(best, abs=1e-4)
    assert written["downstream"]["accuracy"] == pytest.approx(history[-1]["test_accuracy"], abs=1e-4)

    # --patience: stopped where `stalled` says (here made to say so after 2 epochs, whatever the accuracies), marked
    # a lower bound, its state kept; the same call without it continues to the last epoch and drops the mark
    state = tmp_path / "patience-state.pt"
    args = [str(run), "--epochs", "4", "--n-samples", "30", "--out", str(out), "--state", str(state), "--device", "cpu"]
    asked = []
    monkeypatch.setattr(stacked, "stalled", lambda history, patience: asked.append(patience) or len(history) >= 2)
    [stopped] = main(args + ["--patience", "7"])
    assert set(asked) == {7} and stopped["downstream"]["epochs_run"] == 2 and state.exists()
    assert stopped["stopped_early"] == {"patience": 7, "epochs_run": 2, "of": 4}
    assert "a lower bound" in stopped["evaluation"]
    tested = [r["test_accuracy"] for r in stopped["downstream"]["history"]]
    [continued] = main(args)
    assert continued["downstream"]["epochs_run"] == 4 and "stopped_early" not in continued and not state.exists()
    assert [r["test_accuracy"] for r in continued["downstream"]["history"]][:2] == pytest.approx(tested)


def test_the_authors_settings_per_data_set():
    assert authors_settings("fashion_mnist")["lr"] == 2e-3 and authors_settings("mnist")["lr"] == 1e-3
    assert {k: authors_settings("mnist")[k] for k in ("n_samples", "max_epochs", "batch_size")} == {
        "n_samples": 100000, "max_epochs": 600, "batch_size": 512}
    with pytest.raises(ValueError, match="mnist and fashion_mnist only"):
        authors_settings("celeba_gender_s")


def test_a_folder_without_a_generator_is_one_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path)])
    assert stop.value.code == 2 and "no config.yaml" in capsys.readouterr().out
