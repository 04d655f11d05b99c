"""The real-table cells (conf/experiment/<method>/{hi,doctor_contacts}_eps<e>.yaml): each composes and builds its
method at the table's width, PATE-GAN's teacher count is what its comment argues, G-PATE's are the paper's tabular
settings and DP-GAN's generator draws the table's categories."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from dpgen.aggregation.pate_vote import step_cost
from dpgen.cli.common import CONF_DIR
from dpgen.privacy.rdp import DEFAULT_ORDERS

# encoded width (continuous columns + one-hot blocks) and training rows of the fixed split
TABLES = {"hi": (24, 17_818), "doctor_contacts": (21, 16_106)}
CELLS = [(m, t, e) for m in ("dpmerf", "pategan", "gpate", "dpgan") for t in TABLES for e in (1, 10)]


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("method, table, eps", CELLS)
def test_cell_composes_and_builds_its_method(method, table, eps):
    cfg = composed(f"experiment={method}/{table}_eps{eps}", "method.n_teachers=2")
    assert (cfg.method.name, cfg.data.name, cfg.privacy.epsilon, cfg.privacy.delta) == (method, table, eps, 1e-5)
    assert cfg.data.scaling == "public" and cfg.eval.callbacks.image_quality is None
    assert cfg.eval.callbacks.downstream.tabular_models == "gpate"
    width, _ = TABLES[table]
    module = OmegaConf.to_container(cfg.method.module, resolve=True)
    model = instantiate(module, shape=(width,), num_classes=2, kind="table", _convert_="all")
    if method == "pategan":
        # the paper's table nets: teachers one hidden layer of d, student d, d/2, d
        assert model.ensemble.shapes["fc.weight"] == (width, width + 2)
        assert [m.out_features for m in model.student.linears] == [width, width // 2, width, 1]
    if method == "dpgan":  # a category drawn per one-hot block of the table's categorical columns
        assert model.net_g.one_hot == tuple(len(v) for v in cfg.data.categorical.values())
    if method == "gpate":  # the paper's Kaggle Credit cell unchanged but for the data and the step cap
        paper = composed("experiment=unmeasured/gpate/kaggle_credit_eps1")
        assert cfg.method.module.aggregator == paper.method.module.aggregator and cfg.method.max_steps == 1000
        assert composed(f"experiment=gpate/{table}_eps{eps}").method.n_teachers == paper.method.n_teachers == 2100
        assert cfg.method.batch_size == paper.method.batch_size and cfg.method.module.class_ratio_epsilon == 0.01


@pytest.mark.parametrize("table", TABLES)
def test_pategan_teachers_are_n_over_100_because_n_over_1000_cannot_vote_at_eps_1(table):
    _, rows = TABLES[table]
    cfg = composed(f"experiment=pategan/{table}_eps1")
    assert cfg.method.n_teachers == round(rows / 100)
    queries = cfg.method.module.student_steps * cfg.method.module.batch_size

    def first_step_fits(teachers: int, lam: float) -> bool:  # the best case: every vote unanimous
        cost = step_cost(lam, teachers, queries, DEFAULT_ORDERS)
        return cost.epsilon(1e-5, "data_dependent", "classical", case="best") <= 1.0

    small = round(rows / 1000)
    assert first_step_fits(small, 1 / 200) and not any(first_step_fits(small, lam) for lam in (1 / 150, 0.05, 0.2, 1))
    assert first_step_fits(cfg.method.n_teachers, cfg.method.module.lam)
