"""`python -m dpgen.cli.signal_check`: the G-PATE loop outside Lightning, its progress lines and its accounting."""
import json

import numpy as np
import pytest

from dpgen.cli import signal_check
from dpgen.nn.classifier import CNNClassifier
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp


@pytest.fixture
def untrained_classifier(monkeypatch):
    """The label accuracy needs a domain classifier; an untrained one keeps the test from training MNIST's."""
    monkeypatch.setattr(signal_check, "domain_classifier_for", lambda *a, **k: (CNNClassifier(1, 10, 28, hidden=32), {}))


def test_dpgradagg_lines_charge_what_confident_gnmax_costs(tmp_path, capsys, untrained_classifier):
    sigma1, sigma2, batch, k = 50.0, 40.0, 5, 10
    signal_check.main(["--agg", "dpgradagg", "--teachers", "6", "--records", "15", "--batch", str(batch),
                       "--steps", "2", "--every", "1", "--channels", "4", "8", "--hidden", "8",
                       "--sigma1", str(sigma1), "--sigma2", str(sigma2), "--label-matched", "--out", str(tmp_path)])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    first = lines[0]
    # Papernot et al. 2018: every query pays the threshold check a / (2 sigma1^2), each answered one GNMax a / sigma2^2
    orders = np.asarray(DEFAULT_ORDERS, dtype=float)
    queries = batch * k
    answered = round(first["answered"] * queries)
    rdp = queries * orders / (2 * sigma1**2) + answered * orders / sigma2**2
    assert first["eps_data_independent"] == pytest.approx(eps_from_rdp(rdp, orders, 1e-5)[0], abs=1e-3)
    assert first["eps_data_dependent"] <= first["eps_data_independent"]
    assert lines[1]["eps_data_independent"] > first["eps_data_independent"]
    assert 0.0 <= first["top_share"] <= 1.0 and 0.0 <= first["label_acc_eval"] <= 1.0
    assert (tmp_path / "eval_00002.png").exists() and (tmp_path / "train_00002.png").exists()


def test_mean_aggregation_has_no_privacy_numbers(tmp_path, capsys, untrained_classifier):
    signal_check.main(["--agg", "mean", "--teachers", "4", "--records", "15", "--batch", "5", "--steps", "1",
                       "--channels", "4", "8", "--hidden", "8", "--out", str(tmp_path)])
    (line,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert line["step"] == 1 and not any(key.startswith("eps") for key in line)


def test_generator_and_teacher_options_reach_the_loop(tmp_path, capsys, untrained_classifier):
    """--ema adds the averaged generator's label accuracy and grid; --samples sets how many labels are checked."""
    signal_check.main(["--agg", "mean", "--teachers", "4", "--records", "15", "--batch", "5", "--steps", "2",
                       "--every", "2", "--channels", "4", "8", "--hidden", "8", "--augment", "2", "--gen-steps", "2",
                       "--g-beta1", "0.9", "--teacher-lr", "1e-4", "--ema", "0.9", "--samples", "30",
                       "--out", str(tmp_path)])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(0.0 <= line["label_acc_ema"] <= 1.0 for line in lines)
    assert all(line["label_acc_eval"] * 30 == pytest.approx(round(line["label_acc_eval"] * 30), abs=1e-4)
               for line in lines)  # a share of 30 samples
    assert (tmp_path / "ema_00002.png").exists()
