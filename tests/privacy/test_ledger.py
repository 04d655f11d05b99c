"""PrivacyLedger. Hand numbers use one order a = 2 and delta = e^-1: classical eps = rdp + 1."""

import json
import math
import pickle

import numpy as np
import pytest

from dpgen.privacy import PrivacyLedger
from dpgen.privacy.gdp import eps_from_gdp

A2 = np.array([2.0])
DELTA = math.exp(-1.0)


def gpate_like():
    ledger = PrivacyLedger(A2)
    ledger.record("confident_gnmax", {"data_dependent": [0.25], "data_independent": [0.5]}, count=100,
                  params={"sigma1": 600.0, "sigma2": 100.0})
    ledger.record("confident_gnmax", {"data_dependent": [0.125], "data_independent": [0.5]}, count=100,
                  params={"sigma1": 600.0, "sigma2": 100.0})
    ledger.record("class_ratio", {"data_independent": [0.0625]}, params={"epsilon": 0.01})
    return ledger


def test_totals_per_bound():
    ledger = gpate_like()
    # data-dependent: 0.25 + 0.125 + 0.0625 (the Laplace release counts its only value) = 0.4375
    assert ledger.rdp("data_dependent")[0] == pytest.approx(0.4375)
    assert ledger.epsilon(DELTA) == (pytest.approx(1.4375), 2.0)
    # data-independent: 0.5 + 0.5 + 0.0625 = 1.0625
    assert ledger.epsilon(DELTA, "data_independent")[0] == pytest.approx(2.0625)
    assert ledger.bounds == ["data_dependent", "data_independent"]


def test_empty_ledger_is_zero():
    assert PrivacyLedger().epsilon(1e-5) == (0.0, None)


def test_method_specific_bounds_fall_back_conservatively():
    ledger = PrivacyLedger(A2)
    ledger.record("gswgan", {"as_published": [0.25], "sound": [0.75]})
    ledger.record("laplace", {"data_independent": [0.0625]})
    assert ledger.bounds == ["as_published", "data_dependent", "data_independent", "sound"]
    assert ledger.rdp("sound")[0] == pytest.approx(0.8125)
    assert ledger.rdp("as_published")[0] == pytest.approx(0.3125)
    # under a bound gswgan does not give, it counts with the max of what it gives: 0.75
    assert ledger.rdp("data_independent")[0] == pytest.approx(0.8125)
    with pytest.raises(ValueError, match="unknown bound"):
        ledger.rdp("optimistic")


def test_hypothetical_release_for_budget_checks():
    ledger = gpate_like()
    assert ledger.epsilon(DELTA, extra={"data_independent": [0.5]})[0] == pytest.approx(1.9375)
    assert ledger.epsilon(DELTA)[0] == pytest.approx(1.4375)  # unchanged


def test_record_errors():
    ledger = PrivacyLedger(A2)
    with pytest.raises(ValueError, match="shape"):
        ledger.record("m", {"data_independent": [0.1, 0.2]})
    with pytest.raises(ValueError, match="data_independent"):
        ledger.record("m", {"data_dependent": [0.1]})
    with pytest.raises(ValueError, match=">= 0"):
        ledger.record("m", {"data_independent": [-0.1]})
    ledger.record("m", {"data_independent": [0.1]})
    with pytest.raises(ValueError, match="recorded bounds"):
        ledger.record("m", {"data_dependent": [0.1], "data_independent": [0.1]})
    with pytest.raises(ValueError, match="count"):
        ledger.record("m", {"data_independent": [0.1]}, count=-1)
    with pytest.raises(ValueError, match="delta"):
        ledger.epsilon(0.0)


def test_gdp_channel():
    ledger = PrivacyLedger()
    ledger.record_gdp("gnmax", 0.3, count=4, params={"sigma": 10.0})  # 4 releases: sqrt(4 * 0.09) = 0.6
    ledger.record_gdp("dpsgd", 0.8, asymptotic=True)  # total sqrt(0.36 + 0.64) = 1
    assert ledger.mu() == pytest.approx(1.0)
    assert ledger.epsilon(1e-5, conversion="gdp") == (pytest.approx(eps_from_gdp(1.0, 1e-5)), None)
    # through RDP (a mu^2 / 2) the same releases give a larger, still valid, epsilon
    assert ledger.epsilon(1e-5, conversion="improved")[0] > ledger.epsilon(1e-5, conversion="gdp")[0]
    assert ledger.epsilon(1e-5, conversion="gdp", extra={"gdp_mu": math.sqrt(3)})[0] == pytest.approx(
        eps_from_gdp(2.0, 1e-5))
    summary = ledger.summary(1e-5)
    assert summary["mechanisms"]["dpsgd"]["asymptotic_mu"] is True
    assert "gdp" in summary["total"]["data_dependent"]
    ledger.record("laplace", {"data_independent": np.full(ledger.orders.shape, 0.01)})
    with pytest.raises(ValueError, match="GDP releases only"):
        ledger.epsilon(1e-5, conversion="gdp")


def test_state_dict_round_trip_is_plain_python():
    ledger = gpate_like()
    ledger.note_stop("budget", 1)
    state = ledger.state_dict()
    json.dumps(state)  # plain python: safe for weights_only checkpoints
    copy = PrivacyLedger()
    copy.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert copy.epsilon(DELTA) == ledger.epsilon(DELTA)
    assert copy.summary(DELTA) == ledger.summary(DELTA)
    assert copy.stop == {"reason": "budget", "discarded_steps": 1}
    copy.record("class_ratio", {"data_independent": [0.0625]})
    assert ledger.rdp("data_independent")[0] == pytest.approx(1.0625)  # the copy does not alias


def test_summary_and_json():
    ledger = gpate_like()
    summary = ledger.summary(DELTA)
    gnmax = summary["mechanisms"]["confident_gnmax"]
    assert gnmax["count"] == 200 and gnmax["params"] == [{"sigma1": 600.0, "sigma2": 100.0}]
    assert gnmax["epsilon"]["data_dependent"]["classical"]["epsilon"] == pytest.approx(1.375)
    assert gnmax["epsilon"]["data_independent"]["classical"]["epsilon"] == pytest.approx(2.0)
    report = json.loads(ledger.report_json(DELTA, "data_dependent", extra={"run": "test"}))
    assert report["epsilon"] == pytest.approx(1.4375) and report["conversion"] == "classical"
    assert report["governing_bound"] == "data_dependent" and "DATA-DEPENDENT" in report["bounds"]["data_dependent"]
    assert report["total"]["data_independent"]["improved"]["epsilon"] <= report["total"]["data_independent"]["classical"]["epsilon"]
    assert report["run"] == "test"


def test_aliased_bounds_resolve_to_the_bound_they_stand_for():
    aliases = {"data_dependent": "sound", "data_independent": "sound"}
    ledger = PrivacyLedger(A2, aliases=aliases)
    ledger.record("gswgan", {"as_published": [0.25], "sound": [0.75]}, count=3)
    assert ledger.bounds == ["as_published", "sound"]
    assert ledger.resolve_bound("data_dependent") == "sound" and ledger.resolve_bound("as_published") == "as_published"
    for bound in ("data_dependent", "data_independent", "sound"):
        assert ledger.epsilon(math.exp(-1), bound) == (pytest.approx(1.75), 2.0)  # classical: rdp + 1
    assert ledger.epsilon(math.exp(-1), "data_dependent", extra={"sound": [0.25]})[0] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="aliases here"):
        ledger.record("gswgan", {"as_published": [0.25], "sound": [0.75], "data_independent": [0.75]})
    report = json.loads(ledger.report_json(math.exp(-1), "data_dependent"))
    assert report["governing_bound"] == "sound" and report["requested_bound"] == "data_dependent"
    assert report["aliases"] == aliases and sorted(report["bounds"]) == ["as_published", "sound"]
    assert report["epsilon"] == pytest.approx(1.75)
    # a checkpoint from before the aliases, which recorded data_independent too, loads without it
    old = ledger.state_dict()
    old["rdp"]["gswgan"]["rdp"]["data_independent"] = [0.75]
    restored = PrivacyLedger(A2, aliases=aliases)
    restored.load_state_dict(old)
    assert restored.bounds == ["as_published", "sound"]
    assert restored.rdp("data_independent")[0] == pytest.approx(0.75)
