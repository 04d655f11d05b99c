"""python -m dpgen.report: markdown table and PNG plots from run folders (dpgen.cli.report)."""
import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from PIL import Image

from dpgen.cli.report import main


def fake_run(root, method, data, eps, metrics):
    run = root / f"{method}_{data}_{eps}"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        f"method:\n  name: {method}\ndata:\n  name: {data}\nprivacy:\n  epsilon: {eps}\n")
    (run / "samples").mkdir()
    plt.imsave(run / "samples" / "final.png", np.random.default_rng(0).random((28, 28)), cmap="gray")
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


def private(eps, accuracy, spent):
    return {"steps": 10, "wall_time_s": 12.5, "privacy": {"private": True, "epsilon": {"data_dependent": spent}},
            "downstream": {"accuracy": accuracy}, "image_quality": {"IS": 2.0, "FID": 100.0}}


def test_table_and_plots_of_a_sweep(tmp_path):
    sweep = tmp_path / "multirun"
    fake_run(sweep, "gpate", "mnist", 1.0, private(1.0, 0.5, 0.99))
    fake_run(sweep, "gpate", "mnist", 10.0, private(10.0, 0.8, 9.9))
    fake_run(sweep, "gan", "mnist", "inf", {"steps": 5, "wall_time_s": 1.0, "privacy": {"private": False},
                                            "downstream": {"accuracy": 0.95}})
    fake_run(sweep, "pategan", "kaggle_credit", 1.0, {"privacy": {"private": True, "epsilon": {"data_dependent": 1}},
                                                       "downstream": {"average": {"auroc": 0.9, "auprc": 0.4}}})
    fake_run(sweep, "pategan_2018_code", "mnist", 1.0, {"privacy": {"private": False, "claimed_epsilon": 1.0},
                                                         "downstream": {"accuracy": 0.3}})
    (sweep / "unfinished" / ".hydra").mkdir(parents=True)  # no metrics.json: not a row
    out = main([str(sweep)])
    table = (out / "report.md").read_text()
    assert "Runs compared (5)" in table
    # a reproduced code that claims an epsilon without a guarantee: the claim is shown, never as a budget
    assert "| pategan_2018_code | mnist | none (the code claims 1; no guarantee) | none | 0.3 |" in table
    rows = [line for line in table.splitlines() if line.startswith("| gpate")]
    unknown = "unknown (no privacy.json)"
    assert len(rows) == 2 and f"| 1 | {unknown} | 0.5 | - | - |" in rows[0] and f"| 10 | {unknown} | 0.8 | - | - |" in rows[1]
    assert "0.99" in rows[0]
    assert "| gan | mnist | none (not private) | none | 0.95 | - | - |" in table
    assert "| pategan | kaggle_credit | 1 | unknown (no privacy.json) |  |  |  | 0.4 | 0.9 |" in table  # three accuracies, auprc, auroc
    for name in ("utility_vs_epsilon.png", "samples.png"):
        with Image.open(out / name) as image:
            assert image.size[0] > 300 and image.size[1] > 200


def test_missing_folder_and_no_runs_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run"):
        main([str(tmp_path / "nothing")])
    with pytest.raises(FileNotFoundError, match="no finished runs"):
        main([str(tmp_path)])


def test_kept_run_regenerates_its_row_into_the_results_block(tmp_path):
    run = fake_run(tmp_path / "outputs", "gpate", "mnist", 1.0,
                   {**private(1.0, 0.42, 0.98), "peak_rss_gb": 18.7, "machine": "CPU: test, 2 threads"})
    (run / ".hydra" / "overrides.yaml").write_text("- experiment=gpate/mnist_eps1\n- seed=3\n")
    (run / "privacy.json").write_text("{}")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"big")
    kept = main(["--keep", str(run), str(tmp_path / "docs" / "results" / "gpate_mnist_eps1")])
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file()) == [
        "config.yaml", "metrics.json", "overrides.yaml", "privacy.json", "samples/final.png"]
    results_md = tmp_path / "docs" / "RESULTS.md"
    results_md.write_text("# Results\n\n<!-- report -->\nold table\n<!-- /report -->\n\nfindings stay\n")
    main([str(tmp_path / "docs" / "results"), "--out", str(tmp_path / "docs")])
    text = results_md.read_text()
    assert "old table" not in text and text.endswith("<!-- /report -->\n\nfindings stay\n")
    row = next(line for line in text.splitlines() if line.startswith("| gpate"))
    assert "| 0.42 |" in row and "| 18.7 |" in row and "CPU: test, 2 threads" in row
    assert "`python train.py experiment=gpate/mnist_eps1 seed=3`" in row
    assert not (tmp_path / "docs" / "report.md").exists()


def test_a_kept_run_holds_its_generator_in_half_precision_and_is_never_overwritten(tmp_path, monkeypatch):
    from torch import nn

    from dpgen.cli import report
    from dpgen.cli.generate import load_release

    run = fake_run(tmp_path / "outputs", "dpmerf", "mnist", 1.0, private(1.0, 0.9, 1.0))
    generator = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8))
    torch.save({"generator": generator, "z_dim": 4}, run / "generator.pt")
    dest = tmp_path / "results" / "kept"
    main(["--keep", str(run), str(dest)])
    stored = torch.load(dest / "generator.pt", weights_only=False)
    assert stored["stored_precision"] == "float16" and stored["generator"][0].weight.dtype == torch.float16
    loaded = load_release(dest)["generator"]
    assert loaded[0].weight.dtype == torch.float32
    assert torch.allclose(loaded[0].weight, generator[0].weight, atol=1e-3)  # half precision: 3 decimal digits
    with pytest.raises(ValueError, match="never overwritten"):
        main(["--keep", str(run), str(dest)])
    monkeypatch.setattr(report, "KEEP_GENERATOR_MB", 1e-4)  # a generator over the limit is left out, and said so
    main(["--keep", str(run), str(tmp_path / "results" / "other")])
    assert not (tmp_path / "results" / "other" / "generator.pt").exists()


def test_results_file_without_a_block_is_a_clear_error(tmp_path):
    fake_run(tmp_path / "runs", "gan", "mnist", "inf", {"privacy": {"private": False}})
    (tmp_path / "RESULTS.md").write_text("# Results\n")
    with pytest.raises(ValueError, match="<!-- report -->"):
        main([str(tmp_path / "runs"), "--out", str(tmp_path)])


def test_a_resumed_run_shows_its_training_time_over_all_processes_and_their_largest_peak(tmp_path):
    clock = {"processes": 2, "train_s_total": 4130.9, "peak_rss_gb_earlier_processes": 11.66}
    fake_run(tmp_path / "runs", "gpate", "mnist", 10.0,
             {**private(10.0, 0.5, 9.99), "wall_time_s": 1469.1, "peak_rss_gb": 11.29, "run_clock": clock})
    main([str(tmp_path / "runs")])
    row = next(line for line in (tmp_path / "runs" / "report.md").read_text().splitlines() if line.startswith("| gpate"))
    assert "| 1469.1 (last process; training 4131 over 2 processes) | 11.7 |" in row  # 11.66 to 3 digits


def test_the_three_accuracies_side_by_side_a_dash_where_a_run_has_none_and_the_plot_draws_any(tmp_path, monkeypatch):
    three = {"accuracy": 0.7, "selection": "private_val", "synthetic": {"accuracy": 0.6, "epoch": 3},
             "private_val": {"accuracy": 0.7, "epoch": 2, "epsilon": 1.0}, "test": {"accuracy": 0.8, "epoch": 1},
             "max_test_accuracy": 0.8, "max_test_epoch": 1}
    fake_run(tmp_path / "runs", "dpmerf", "mnist", 1.0, {**private(1.0, 0, 1.0), "downstream": three})
    before = {"accuracy": 0.5, "max_test_accuracy": 0.9}  # a run from before the three protocols
    fake_run(tmp_path / "runs", "gpate", "mnist", 1.0, {**private(1.0, 0, 1.0), "downstream": before})
    drawn = []
    monkeypatch.setattr("dpgen.cli.report.plt.Axes.plot", lambda ax, *points, **kw: drawn.append(points))
    main([str(tmp_path / "runs"), "--accuracy", "private_val"])
    table = (tmp_path / "runs" / "report.md").read_text()
    head = next(line for line in table.splitlines() if line.startswith("| method"))
    assert ("| budget eps | guarantee | accuracy (synthetic hold-out) | accuracy (private val selection) | "
            "accuracy (test-chosen, not DP) |") in head
    unknown = "unknown (no privacy.json)"
    assert f"| mnist | 1 | {unknown} | 0.6 | 0.7 | 0.8 |" in table and f"| 1 | {unknown} | 0.5 | - | 0.9 |" in table
    assert drawn == [((1.0,), (0.7,))]  # only the run with a private validation accuracy, at its value


def test_a_noise_free_control_is_labelled_in_the_table_and_not_drawn_at_the_budget(tmp_path, monkeypatch):
    fake_run(tmp_path / "runs", "dpgan", "mnist", 1.0, private(1.0, 0.4, 0.99))
    control = fake_run(tmp_path / "runs", "dpgan", "mnist", "1.0_control", private(1.0, 0.93, 1.1e9))
    config = control / ".hydra" / "config.yaml"  # method.private=false: the ledger ran, no budget stopped it
    config.write_text(config.read_text().replace("name: dpgan\n", "name: dpgan\n  private: false\n")
                      .replace("1.0_control", "1.0"))
    drawn, lines = [], []
    monkeypatch.setattr("dpgen.cli.report.plt.Axes.plot", lambda ax, *points, **kw: drawn.append(points))
    monkeypatch.setattr("dpgen.cli.report.plt.Axes.axhline", lambda ax, *a, **kw: lines.append(a))
    main([str(tmp_path / "runs")])
    table = (tmp_path / "runs" / "report.md").read_text()
    assert "| dpgan | mnist | none (privacy off) | none | 0.93 |" in table
    assert "| dpgan | mnist | 1 | unknown (no privacy.json) | 0.4 |" in table
    assert drawn == [((1.0,), (0.4,))] and lines == []


# a G-PATE run's privacy.json: stopped by the data-dependent bound at 0.99, whose DP (data-independent) bound is 1.58
DATA_DEPENDENT = {"private": True, "epsilon": 0.99, "delta": 1e-5, "governing_bound": "data_dependent",
                  "conversion": "classical", "total": {"data_dependent": {"classical": {"epsilon": 0.99}},
                                                       "data_independent": {"classical": {"epsilon": 1.58}}}}


def test_each_comparison_cell_is_labelled_by_its_runs_own_guarantee(tmp_path):
    """A cell's label comes from its run's privacy.json, not from its column: a run without a guarantee says so, a
    DP run says nothing more, and a control or a run of another budget cannot stand in a DP column."""
    results = tmp_path / "results"
    dp = fake_run(results, "dpmerf", "mnist", 1.0, private(1.0, 0.9, 1.0))
    (dp / "privacy.json").write_text(json.dumps({"private": True, "epsilon": 1.0, "delta": 1e-5,
                                                 "governing_bound": "data_independent"}))
    claim = fake_run(results, "pategan_2018_code", "mnist", 1.0, {"privacy": {"private": False, "claimed_epsilon": 1},
                                                                   "downstream": {"accuracy": 0.8}})
    (claim / "privacy.json").write_text(json.dumps({"private": False, "guarantee": "none", "claimed_epsilon": 1.0}))
    ten = fake_run(results, "dpgan", "mnist", 10.0, private(10.0, 0.8, 9.9))
    (ten / "privacy.json").write_text(json.dumps({"private": True, "epsilon": 9.9, "delta": 1e-5,
                                                  "governing_bound": "data_independent"}))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "RESULTS.md").write_text("<!-- comparison -->\n<!-- /comparison -->\n<!-- report -->\n<!-- /report -->\n")

    def block(cells: str) -> str:
        (results / "comparison.yaml").write_text(f"columns: {{mnist: [1]}}\nmethods:\n  - {{name: X, cells: {cells}}}\n")
        main([str(results), "--out", str(docs)])
        return (docs / "RESULTS.md").read_text().split("<!-- comparison -->\n")[1].split("<!-- /comparison -->")[0]

    assert "](results/dpmerf_mnist_1.0) |" in block("{mnist_1: {run: dpmerf_mnist_1.0}}")
    assert "](results/pategan_2018_code_mnist_1.0) (no DP guarantee) |" in block(
        "{mnist_1: {run: pategan_2018_code_mnist_1.0}}")
    with pytest.raises(ValueError, match="at budget 10: not a cell of the eps = 1 column"):
        block("{mnist_1: {run: dpgan_mnist_10.0}}")
    table = (docs / "RESULTS.md").read_text().split("<!-- report -->")[1]
    assert "| none (the code claims 1; no guarantee) | none |" in table and "| 1 | DP eps 1 |" in table


def test_the_comparison_table_takes_each_cell_from_the_run_its_spec_names(tmp_path, monkeypatch):
    results = tmp_path / "results"
    three = {"accuracy": 0.25, "synthetic": {"accuracy": 0.25, "epoch": 9},
             "private_val": {"accuracy": 0.3, "epoch": 2}, "test": {"accuracy": 0.625, "epoch": 1}}
    gpate = fake_run(results, "gpate", "mnist", 1.0, {**private(1.0, 0.25, 0.99), "downstream": three})
    (gpate / "privacy.json").write_text(json.dumps(DATA_DEPENDENT))
    authors = {"data": "mnist", "settings": {"max_epochs": 600, "n_samples": 100000, "batch_size": 512, "lr": 1e-3,
                                             "cnn": "reference_script"}, "downstream": {"max_test_accuracy": 0.6253}}
    (gpate / "eval_reference.json").write_text(json.dumps(authors))
    fake_run(results, "gan", "mnist", "inf", {"privacy": {"private": False}, "downstream": {"accuracy": 0.92}})
    fake_run(results, "gpate", "mnist", 10.0, private(10.0, 0.11, 9.9))  # a run no cell names
    drawn = []
    monkeypatch.setattr("dpgen.cli.report.plt.Axes.plot", lambda ax, *points, **kw: drawn.append(points))
    (results / "comparison.yaml").write_text(
        "columns: {mnist: [1, 10]}\nmethods:\n"
        "  - {name: G-PATE, cells: {mnist_1: {experiment: gpate/mnist_eps1, run: gpate_mnist_1.0}},\n"
        "     paper: {mnist_1: 0.588, mnist_10: 0.8092}}\n"
        "  - {name: GAN, cells: {mnist: {run: gan_mnist_inf}}, paper: {mnist: 0.9653}}\n"
        "  - {name: Y, notes: {mnist_1: 'no step fits (plan)'}, paper: {mnist_10: 0.6073}, paper_name: Y paper}\n"
        "  - {name: PTG, cells: {mnist_10: {run: ptg_mnist_10.0}}, paper: {mnist_10: 0.6073}, paper_name: PTG paper,\n"
        "     paper_eval: ptg}\n")
    ptg = fake_run(results, "ptg", "mnist", 10.0, {**private(10.0, 0.5, 9.9), "downstream": three})
    (ptg / "privacy.json").write_text(json.dumps({"private": True, "epsilon": 9.9, "delta": 1e-5,
                                                  "governing_bound": "data_independent"}))
    ptg_settings = {"n_samples": 20000, "max_epochs": 10, "val_fraction": 0.0, "patience": None, "repeats": 5,
                    "cnn": "ptg", "optimizer": "adam", "lr": 1e-3, "batch_size": 128, "selection": "synthetic"}
    (ptg / "eval_ptg.json").write_text(json.dumps({"downstream": {"accuracy": 0.6104, "settings": ptg_settings}}))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "RESULTS.md").write_text("# R\n<!-- comparison -->\nold\n<!-- /comparison -->\n<!-- report -->\n"
                                     "<!-- /report -->\n")
    main([str(results), "--out", str(docs)])
    block = (docs / "RESULTS.md").read_text().split("<!-- comparison -->\n")[1].split("<!-- /comparison -->")[0]
    assert block.splitlines() == [
        "| method | mnist, eps = 1 | mnist, eps = 10 |", "|---|---:|---:|",
        "| G-PATE | [25.0 / 30.0 / 62.5](results/gpate_mnist_1.0) (data-dependent eps; DP eps 1.58) "
        "(authors' eval 62.5, paper 58.80) | not run (authors' eval not run, paper 80.92) |",
        "| GAN | [92.0 / - / -](results/gan_mnist_inf) (authors' eval not run, paper 96.53) "
        "| [92.0 / - / -](results/gan_mnist_inf) (authors' eval not run, paper 96.53) |",
        "| Y | no step fits (plan) | not run (Y paper 60.73) |",
        "| PTG | not run | [25.0 / 30.0 / 62.5](results/ptg_mnist_10.0) (PTG's eval 61.0, PTG paper 60.73) |"]
    assert sorted(drawn) == [((1.0,), (0.25,)), ((10.0,), (0.25,))]  # the plot draws the cells' runs only
    for key, value in {"max_epochs": 20, "lr": 2e-3}.items():  # a shortened evaluation, Fashion-MNIST's rate
        (gpate / "eval_reference.json").write_text(json.dumps({**authors, "settings": {**authors["settings"],
                                                                                      key: value}}))
        with pytest.raises(ValueError, match="not the authors' evaluation"):
            main([str(results), "--out", str(docs)])
    # stopped early (--patience): the best of the epochs run, shown as a lower bound with how many ran
    (gpate / "eval_reference.json").write_text(json.dumps({**authors, "stopped_early": {
        "patience": 150, "epochs_run": 171, "of": 600}}))
    main([str(results), "--out", str(docs)])
    assert "(authors' eval >= 62.5 (epochs 1-171 of 600), paper 58.80)" in (docs / "RESULTS.md").read_text()
    (gpate / "eval_reference.json").write_text(json.dumps(authors))
    (ptg / "eval_ptg.json").write_text(json.dumps({"downstream": {"accuracy": 0.6104,  # one training, not five
                                                                 "settings": {**ptg_settings, "repeats": 1}}}))
    with pytest.raises(ValueError, match="not PATE-TripleGAN's evaluation"):
        main([str(results), "--out", str(docs)])
    (results / "comparison.yaml").write_text("columns: {mnist: [1]}\nmethods:\n  - {name: X, cells: {mnist_1: {run: gone}}}\n")
    with pytest.raises(FileNotFoundError, match="gone .cell X, mnist_1. is no kept run"):
        main([str(results), "--out", str(docs)])


def test_the_authors_evaluation_is_drawn_epoch_by_epoch_beside_the_papers_number(tmp_path, monkeypatch):
    results = tmp_path / "results"
    history = [{"epoch": e, "loss": 1.0 / e, "test_accuracy": a, "seconds": 1.0}
               for e, a in enumerate([0.5, 0.75, 0.7, 0.6], start=1)]
    settings = {"max_epochs": 600, "n_samples": 100000, "batch_size": 512, "lr": 1e-3, "cnn": "reference_script"}
    for method, eps, curve in (("gpate", 10.0, history), ("gan", "inf", history[:2]), ("ptg", 10.0, history)):
        run = fake_run(results, method, "mnist", eps, private(10.0, 0.11, 9.9) if method != "gan" else
                       {"privacy": {"private": False}, "downstream": {"accuracy": 0.92}})
        (run / "privacy.json").write_text(json.dumps(DATA_DEPENDENT))
        stopped = {"stopped_early": {"patience": 1, "epochs_run": 2, "of": 600}} if method == "gan" else {}
        (run / "eval_reference.json").write_text(json.dumps({"data": "mnist", "settings": settings, "downstream": {
            "max_test_accuracy": max(r["test_accuracy"] for r in curve), "history": curve}, **stopped}))
    spec = ("columns: {mnist: [10]}\nmethods:\n"
            "  - {name: G-PATE, cells: {mnist_10: {run: gpate_mnist_10.0}}, paper: {mnist_10: 0.8092}}\n"
            "  - {name: GAN, cells: {mnist: {run: gan_mnist_inf}}}\n"
            "  - {name: PTG, cells: {mnist_10: {run: ptg_mnist_10.0}}, paper: {mnist_10: 0.6073}, paper_name: PTG paper}\n")
    (results / "comparison.yaml").write_text(spec)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "RESULTS.md").write_text("<!-- comparison -->\n<!-- /comparison -->\n<!-- report -->\n<!-- /report -->\n")
    lines, dashed = {}, []
    plot, axhline = plt.Axes.plot, plt.Axes.axhline
    monkeypatch.setattr(plt.Axes, "plot", lambda ax, *a, **kw: lines.setdefault(kw.get("label"), a) and plot(ax, *a, **kw))
    monkeypatch.setattr(plt.Axes, "axhline", lambda ax, y, **kw: dashed.append((y, kw["label"])) or axhline(ax, y, **kw))
    main([str(results), "--out", str(docs)])
    # each cell's epochs as recorded, its best epoch in the legend and marked; the paper's number beside G-PATE's;
    # the cell of another paper (scored by that paper's evaluation) left out
    assert lines["G-PATE, mnist, eps 10: best 75.0 (epoch 2)"] == ([1, 2, 3, 4], [50.0, 75.0, 70.0, 60.0])
    assert lines["GAN, mnist: best >= 75.0 (epoch 2; stopped at 2)"] == ([1, 2], [50.0, 75.0])  # --patience
    assert lines[None] == ([2], [75.0]) and not any(str(label).startswith("PTG") for label in lines)
    assert [line for line in dashed if "paper" in line[1]] == [(pytest.approx(80.92), "G-PATE, mnist, eps 10: paper 80.92")]
    assert Image.open(docs / "authors_eval.png").size[0] > 0
    for run in results.glob("*/eval_reference.json"):
        run.unlink()
    (docs / "authors_eval.png").unlink()
    main([str(results), "--out", str(docs)])
    assert not (docs / "authors_eval.png").exists()  # no cell evaluated: no empty picture
