import json
import math

import numpy as np
import pytest

from dpgen.privacy import __main__ as cli
from dpgen.privacy import pld
from dpgen.privacy.dpsgd import rdp_subsampled_gaussian
from dpgen.privacy.pate import rdp_confident_gnmax
from dpgen.privacy.plan import MAX_STEPS, plan_confident_gnmax, plan_dpsgd, steps_within_budget
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp

DELTA = math.exp(-1.0)  # with the single order 2: eps = rdp + 1


def test_steps_by_hand():
    # 0.25 per step, eps 2.05 -> rdp <= 1.05 -> 4 steps
    assert steps_within_budget([0.25], [2.0], 2.05, DELTA) == 4
    assert steps_within_budget([0.25], [2.0], 1.2, DELTA) == 0
    assert steps_within_budget([0.0], [2.0], 2.0, DELTA) == MAX_STEPS


def test_confident_gnmax_worst_case_by_hand():
    # per query, all answered: 2/(2 * 10^2) + 2/10^2 = 0.03; 10 queries per step: 0.3; rdp <= 1.05 -> 3 steps
    plan = plan_confident_gnmax(100, 10.0, 10.0, 0.5, 10, 2.05, DELTA, orders=[2.0])
    assert plan["worst_case_steps"] == 3
    assert plan["best_case_steps"] >= plan["worst_case_steps"]


def test_confident_gnmax_paper_settings():
    # G-PATE eps = 10 on MNIST: 2000 teachers, sigma1 600, sigma2 100, T = 0.5: unanimous votes cost far less
    plan = plan_confident_gnmax(2000, 600.0, 100.0, 0.5, 100, 10.0, 1e-5)
    assert plan["best_case_steps"] > 10 * plan["worst_case_steps"] > 0


def test_confident_gnmax_best_case_follows_the_consensus():
    """The best case with the top bin holding 80% of 100 votes is the data-dependent cost of votes (80, 20),
    between the unanimous best case and the worst case."""
    orders = np.asarray(DEFAULT_ORDERS)
    split = plan_confident_gnmax(100, 8.0, 12.0, 0.6, 600, 10.0, 1e-5, bins=2, top_share=0.8)
    one = rdp_confident_gnmax(np.array([80.0, 20.0]), 60.0, 8.0, 12.0, orders, answered=True)
    assert split["best_case_steps"] == steps_within_budget(600 * one, orders, 10.0, 1e-5)
    unanimous = plan_confident_gnmax(100, 8.0, 12.0, 0.6, 600, 10.0, 1e-5, bins=2)
    assert unanimous["worst_case_steps"] <= split["best_case_steps"] < unanimous["best_case_steps"]
    with pytest.raises(ValueError, match="top_share"):
        plan_confident_gnmax(100, 8.0, 12.0, 0.6, 600, 10.0, 1e-5, top_share=0.3)


def test_dpsgd_plan_is_tight():
    plan = plan_dpsgd(0.01, 1.1, 2.0, 1e-5)
    n = plan["worst_case_steps"]
    eps = lambda steps: eps_from_rdp(rdp_subsampled_gaussian(0.01, 1.1, steps, DEFAULT_ORDERS), DEFAULT_ORDERS, 1e-5)[0]
    assert eps(n) <= 2.0 < eps(n + 1)


def test_cli(capsys):
    result = cli.main(["plan", "confident_gnmax", "--teachers", "4000", "--sigma1", "3000", "--sigma2", "1000",
                       "--threshold", "0.5", "--queries-per-step", "100", "--epsilon", "1", "--delta", "1e-5"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == result and result["worst_case_steps"] > 0
    with pytest.raises(SystemExit):
        cli.main(["plan", "confident_gnmax", "--teachers", "10"])


def test_dpsgd_plan_under_pld_is_tight_and_on_the_cli(capsys):
    # DP-CGAN's reference sample rate and sigma: no step at eps = 1 under RDP, a run under PLD
    result = cli.main(["plan", "dpsgd", "--sample-rate", "0.01", "--noise-multiplier", "1.12", "--epsilon", "1",
                       "--delta", "1e-5", "--conversion", "pld"])
    n = result["worst_case_steps"]
    assert json.loads(capsys.readouterr().out)["best_case_steps"] == n > 100
    eps = [pld.epsilon_pld([(pld.dpsgd_event(0.01, 1.12), k)], 1e-5) for k in (n, n + 1)]
    assert eps[0] <= 1.0 < eps[1]
    assert plan_dpsgd(0.01, 1.12, 1.0, 1e-5)["worst_case_steps"] == 0
    with pytest.raises(SystemExit):  # PLD only where every release is a (subsampled) Gaussian
        cli.main(["plan", "laplace_pate", "--teachers", "10", "--lam", "0.1", "--queries-per-step", "1",
                  "--epsilon", "1", "--delta", "1e-5", "--conversion", "pld"])
