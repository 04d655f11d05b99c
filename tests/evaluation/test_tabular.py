import numpy as np
import pytest
import torch

from dpgen.evaluation.downstream import (
    feature_importance,
    feature_ranking_agreement,
    gpate_models,
    pategan_models,
    synthetic_ranking_agreement,
    tabular_evaluation,
    tabular_scores,
)


def separable_table(n, seed):
    """Feature 0 is -1 or +1 (plus noise of at most 0.1) by label; features 1-3 are label-free noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = rng.normal(size=(n, 4))
    x[:, 0] = 2 * y - 1 + rng.uniform(-0.1, 0.1, size=n)
    return x, y


def test_gpate_model_settings_of_appendix_e():
    models = gpate_models()
    lr = models["logistic_regression"]
    assert (lr.l1_ratio, lr.solver, lr.class_weight) == (1.0, "liblinear", {0: 1, 1: 350})
    assert models["adaboost"].n_estimators == 200 and models["bagging"].n_estimators == 100
    assert models["adaboost"].estimator.l1_ratio == 0.0  # L2 logistic regression inside
    mlp = models["mlp"]
    assert (mlp.hidden_layer_sizes, mlp.activation, mlp.solver) == ((18, 18, 18), "tanh", "adam")


def test_pategan_has_the_twelve_models_of_table_1():
    pytest.importorskip("xgboost")
    assert len(pategan_models()) == 12


@pytest.mark.parametrize("models", ["gpate", "pategan"])
def test_auroc_on_a_perfectly_separable_table_is_one(models):
    x, y = separable_table(200, 0)
    test_x, test_y = separable_table(100, 1)
    scores = tabular_scores(torch.tensor(x), torch.tensor(y), test_x, test_y, models=models)
    for name, metrics in scores.items():
        assert metrics == {"auroc": 1.0, "auprc": 1.0}, name


def test_single_class_training_set_scores_like_a_constant():
    """A constant score ranks nothing: AUROC = 1/2; AUPRC = precision at the only threshold = positive rate 3/10."""
    test_y = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    scores = tabular_scores(np.zeros((6, 2)), np.zeros(6), np.random.rand(10, 2), test_y)
    assert scores["average"]["auroc"] == 0.5
    assert scores["average"]["auprc"] == pytest.approx(0.3)


def test_sra_of_identical_rankings_is_one_and_of_reversed_is_zero():
    a = [0.9, 0.8, 0.7, 0.95]
    assert synthetic_ranking_agreement(a, a) == 1.0
    assert synthetic_ranking_agreement(a, [0.1, 0.2, 0.3, 0.05]) == 0.0


def test_sra_hand_computed():
    """A = (1, 2, 3), C = (1, 3, 2): pairs (1,2) and (1,3) keep their order, (2,3) swaps;
    eq. 8 counts ordered pairs: 4 of L(L-1) = 6 agree, SRA = 2/3. Ties count as disagreement."""
    assert synthetic_ranking_agreement({"m1": 1, "m2": 2, "m3": 3}, {"m3": 2, "m1": 1, "m2": 3}) == pytest.approx(2 / 3)
    assert synthetic_ranking_agreement([1, 2], [5, 5]) == 0.0
    with pytest.raises(ValueError):
        synthetic_ranking_agreement([1, 2, 3], [1, 2])


def test_feature_importance_is_absolute_pearson_correlation():
    """y = (0,0,1,1): a copy of y has |r| = 1, its negation too, a constant column 0, and
    x = (0,1,0,1) is uncorrelated with y (centred products -1/4+1/4-1/4+1/4 = 0)."""
    y = np.array([0, 0, 1, 1])
    x = np.stack([y, -3 * y, np.full(4, 7.0), np.array([0, 1, 0, 1])], axis=1)
    assert feature_importance(x, y) == pytest.approx([1.0, 1.0, 0.0, 0.0])
    assert feature_ranking_agreement(x[:, [0, 3]], y, x[:, [0, 3]], y) == 1.0


def test_settings_a_b_c_and_agreements():
    x, y = separable_table(300, 2)
    test_x, test_y = separable_table(100, 3)
    result = tabular_evaluation(x, y, test_x, test_y, x.copy(), y.copy(), models="gpate")
    assert set(result) == {"A", "B", "C", "sra", "feature_ranking_agreement"}
    assert result["A"]["average"]["auroc"] == result["B"]["average"]["auroc"] == 1.0
    assert 0.0 <= result["sra"]["auroc"] <= 1.0
    assert result["feature_ranking_agreement"] == 1.0  # the "synthetic" set is the real one
