"""python -m dpgen.cli.plan: steps within the budget from the Hydra configs (dpgen.cli.plan)."""
import numpy as np
import pytest
import torch

from dpgen.aggregation.dpgradagg import DPGradAggParams, worst_case_rdp
from dpgen.cli.plan import main
from dpgen.data.partition import partition_indices
from dpgen.data.split import stratified_split
from dpgen.privacy.laplace import rdp_laplace
from dpgen.privacy.plan import plan_confident_gnmax
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp


def test_mnist_eps1_matches_the_privacy_planner_without_loading_data():
    # b = min(15, 60000 / 4000 = 15) = 15 fake samples, k = 10: 150 queries per step
    result = main(["method=gpate", "data=mnist", "privacy.epsilon=1", "data.root=/nonexistent", "data.download=false"])
    assert result["records_source"] == "known size" and result["records"] == 60_000
    assert (result["batch"], result["queries_per_step"]) == (15, 150)
    want = plan_confident_gnmax(4000, 3000.0, 1000.0, 0.5, 150, 1.0, 1e-5)
    assert (result["best_case_steps"], result["worst_case_steps"]) == (want["best_case_steps"], want["worst_case_steps"])
    assert result["worst_case_steps"] > 0


def test_experiment_and_overrides_change_the_plan():
    ten = main(["experiment=gpate_fashion_mnist_eps10"])
    assert (ten["teachers"], ten["batch"], ten["queries_per_step"], ten["epsilon"]) == (2000, 30, 300, 10.0)
    # without projection every pixel is a query: 15 * 784
    assert main(["experiment=gpate_mnist_ablation_projnone"])["queries_per_step"] == 15 * 784
    # b is clamped to the smallest partition: 60000 / 10000 teachers = 6 records each
    assert main(["experiment=gpate_mnist_eps1", "method.n_teachers=10000"])["batch"] == 6


def test_known_sizes_equal_the_data_code():
    # Kaggle Credit: 284,315 normal and 492 fraud; stratified_split sends round(n_c * 0.2) of each class to test
    labels = torch.cat([torch.zeros(284_315, dtype=torch.long), torch.ones(492, dtype=torch.long)])
    train, _ = stratified_split(labels, 0.2, 0)
    result = main(["experiment=gpate_kaggle_credit_eps1"])
    assert result["records"] == len(train) == (284_315 - 56_863) + (492 - 98)
    assert result["smallest_partition"] == 227_846 // 2100 == 108 and result["batch"] == 32
    for n, t in [(60_000, 4000), (227_846, 2100), (10, 3), (7, 7)]:  # smallest partition = n // t
        assert min(len(p) for p in partition_indices(n, t, 0)) == n // t


def test_the_class_ratio_release_is_paid_first():
    with_ratio = main(["experiment=gpate_kaggle_credit_eps1"])
    without = main(["experiment=gpate_kaggle_credit_eps1", "method.module.class_ratio_epsilon=null"])
    orders = np.asarray(DEFAULT_ORDERS, dtype=float)
    agg = DPGradAggParams(clip=1e-4, bins=10, proj_dim=5, sigma1=1500.0, sigma2=600.0)
    step, prior = worst_case_rdp(agg, 32 * 5, orders), rdp_laplace(0.01, orders)
    n = with_ratio["worst_case_steps"]

    def eps(total):
        return eps_from_rdp(total, orders, 1e-5)[0]

    assert eps(prior + n * step) <= 1.0 < eps(prior + (n + 1) * step)  # the largest n that fits
    assert 0 < n <= without["worst_case_steps"]


def test_unknown_sizes_are_counted_by_loading(tmp_path):
    path = tmp_path / "t.csv"
    rows = ["a,b,label"] + [f"{i % 7 / 7},{i % 3 / 3},{i % 2}" for i in range(50)]
    path.write_text("\n".join(rows) + "\n")
    result = main(["method=gpate", "data=csv", f"data.path={path}", "data.label=label", "data.classes=[0,1]",
                   "data.default_range=[0,1]", "method.n_teachers=4", "method.batch_size=32"])
    # 25 + 25 records, 5 of each class to test: 40 training records, 4 partitions of 10, b = 10, k = 10
    assert result["records_source"] == "loaded" and result["records"] == 40
    assert (result["smallest_partition"], result["batch"], result["queries_per_step"]) == (10, 10, 100)


def test_a_method_without_planner_is_a_clear_error():
    with pytest.raises(ValueError, match="no privacy planner for method=gan"):
        main(["method=gan"])
