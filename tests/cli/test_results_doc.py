"""docs/RESULTS.md (the comparison, the method cards) and docs/RUNS.md (every kept run) are generated from docs/results/:
they must be what the report makes of those files."""
import json
import re
from pathlib import Path

import pytest

from dpgen.cli.cards import (CARDS_BEGIN, CARDS_END, GOALS_BEGIN, GOALS_END, TABLES_BEGIN, TABLES_END, WHICH_BEGIN,
                             WHICH_END, cards, control_run, goals_table, rerun_names, tables_table, verdict,
                             which_method)
from dpgen.cli.report import (BEGIN, CARDS, COMPARISON, COMPARISON_BEGIN, COMPARISON_END, END, GOALS, TABLES,
                              comparison_table, find_runs, load_run, markdown_table)

ROOT = Path(__file__).resolve().parents[2]


def test_results_table_is_generated_from_the_kept_run_files(monkeypatch):
    monkeypatch.chdir(ROOT)  # the table names run folders relative to the repository, as `make results` writes it
    runs = find_runs([Path("docs/results")])
    assert runs, "docs/results/ holds no kept run"
    stale = "is out of date: run `make results` (python -m dpgen.report docs/results --out docs/)"
    block = (ROOT / "docs" / "RUNS.md").read_text().split(BEGIN, 1)[1].split(END, 1)[0]
    assert block == "\n" + markdown_table([load_run(run) for run in runs]), f"docs/RUNS.md {stale}"
    assert all((run / "privacy.json").exists() or load_run(run)["budget"] == float("inf") for run in runs)
    text = (ROOT / "docs" / "RESULTS.md").read_text()
    comparison = text.split(COMPARISON_BEGIN, 1)[1].split(COMPARISON_END, 1)[0]
    assert comparison == "\n" + comparison_table(Path("docs/results") / COMPARISON), f"the comparison {stale}"
    block = text.split(CARDS_BEGIN, 1)[1].split(CARDS_END, 1)[0]
    assert block == "\n" + cards(Path("docs/results") / CARDS, Path("docs/results") / COMPARISON), f"the cards {stale}"
    block = text.split(TABLES_BEGIN, 1)[1].split(TABLES_END, 1)[0]
    assert block == "\n" + tables_table(Path("docs/results") / TABLES), f"the tables {stale}"
    block = text.split(GOALS_BEGIN, 1)[1].split(GOALS_END, 1)[0]
    assert block == "\n" + goals_table(Path("docs/results") / GOALS), f"the goals {stale}"
    assert text.index(COMPARISON_BEGIN) < text.index(CARDS_BEGIN)  # the comparison opens the page, the cards follow


def test_the_answer_pages_fit_their_sizes_and_the_readme_table_is_generated(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert len((ROOT / "docs" / "RESULTS.md").read_bytes()) <= 30_000
    block = (ROOT / "README.md").read_text().split(WHICH_BEGIN, 1)[1].split(WHICH_END, 1)[0]
    assert block == "\n" + which_method(Path("docs/results") / COMPARISON), "README.md's table: run `make results`"


def test_readme_opens_with_the_two_commands_and_stays_short():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 8_192
    first_block = text.split("\n\n    ", 1)[1].split("\n\n", 1)[0]
    assert first_block.startswith("make train") and "make test" in first_block
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert "session" not in doc.read_text().lower(), f"{doc.name} speaks of working sessions"


# the most docs/results may hold: 82 MB when kept generators began (report.KEEP_GENERATOR_MB each), 37 MB once the
# kept runs' intermediate sample grids went (a kept run holds its final grid only, report.keep)
RESULTS_MB = 128


def test_the_kept_runs_stay_within_their_stated_size():
    size = sum(p.stat().st_size for p in (ROOT / "docs" / "results").rglob("*") if p.is_file()) / 2**20
    assert size <= RESULTS_MB, f"docs/results holds {size:.0f} MB, over its {RESULTS_MB} MB: keep the clone quick"


def test_the_tables_matrix_puts_each_score_in_its_row_table_and_budget(tmp_path):
    """tables.yaml's rows x tables x (no privacy, eps 1, eps 10): a peer's evaluate.py output with its seconds, a
    control and a cell from kept runs, a note where no run stands."""
    (tmp_path / "rows").mkdir()
    (tmp_path / "rows/real_t.json").write_text(json.dumps({"downstream": {"average": {"auroc": 0.9, "auprc": 0.8}}}))
    (tmp_path / "rows/mst_t_eps1.gpate.eval.json").write_text(
        json.dumps({"downstream": {"average": {"auroc": 0.7, "auprc": 0.6}}}))
    (tmp_path / "rows/mst_t_eps1.peer.json").write_text(json.dumps({"seconds": 61.4}))
    (tmp_path / "kept").symlink_to(ROOT / "docs/results/dpmerf_hi_eps1")
    (tmp_path / "control").symlink_to(ROOT / "docs/results/dpmerf_doctor_contacts_control")
    (tmp_path / "tables.yaml").write_text(
        "tables: {t: T, u: U}\n"
        "beside:\n  - {row: real, t: rows/real_t.json}\n  - {row: MST, t_1: rows/mst_t_eps1.gpate.eval.json}\n"
        "  - {row: M, u: control}\n"
        "cells:\n  - {row: M, experiment: m/u_eps10_guide, run: kept}\n"
        "  - {row: M, experiment: m/t_eps1, run: null, note: why not}\n")
    text = tables_table(tmp_path / "tables.yaml")
    assert text.split("\n\n")[1] == ("Each cell reruns by `python train.py experiment=<name>` (<table>: t, u; <e>: 1, "
                                     "10): M: `m/u_eps10_guide`, `m/t_eps1`.\n")
    header, rule, real, mst, m = text.split("\n\n")[0].splitlines()
    assert header == "| | T no privacy | T eps 1 | T eps 10 | U no privacy | U eps 1 | U eps 10 |"
    assert real == f"| real | [0.900 / 0.800]({tmp_path.name}/rows/real_t.json) |  |  |  |  |  |"
    assert mst == f"| MST |  | [0.700 / 0.600]({tmp_path.name}/rows/mst_t_eps1.gpate.eval.json), 61 s |  |  |  |  |"
    kept, control = (load_run(ROOT / f"docs/results/{name}")["utility"]
                     for name in ("dpmerf_hi_eps1", "dpmerf_doctor_contacts_control"))
    score = f"[{kept['auroc']:.3f} / {kept['auprc']:.3f}]({tmp_path.name}/kept), 391 s"
    assert m == (f"| M |  | why not |  | [{control['auroc']:.3f} / {control['auprc']:.3f}]({tmp_path.name}/control), "
                 f"237 s |  | {score} |")
    (tmp_path / "tables.yaml").write_text("tables: {t: T}\nbeside:\n  - {row: M, t: kept}\ncells: []\n")
    with pytest.raises(ValueError, match="kept is named as a noise-free control, but its noise was on .eps 1 spent"):
        tables_table(tmp_path / "tables.yaml")  # a private run in the no-privacy column


def test_a_cell_or_control_with_repeats_shows_their_spread(tmp_path):
    """A cell's `repeats` and a list of controls in `beside`: the first run's scores, then the AUROC range and mean
    of all of them."""
    names = ("dpmerf_hi_eps1", "dpmerf_hi_eps10", "dpmerf_doctor_contacts_control", "dpmerf_hi_control")
    for name in names:
        (tmp_path / name).symlink_to(ROOT / f"docs/results/{name}")
    (tmp_path / "tables.yaml").write_text(
        "tables: {t: T}\nbeside:\n  - {row: M, t: [dpmerf_doctor_contacts_control, dpmerf_hi_control]}\n"
        "cells:\n  - {row: M, experiment: m/t_eps1, run: dpmerf_hi_eps1, repeats: [dpmerf_hi_eps10]}\n")
    m = tables_table(tmp_path / "tables.yaml").splitlines()[2]
    a, b, c, d = (load_run(ROOT / f"docs/results/{name}")["utility"]["auroc"] for name in names)
    control = (f"{c:.3f} / .*\\(.*/dpmerf_doctor_contacts_control\\), 237 s; 2 seeds {min(c, d):.3f}-{max(c, d):.3f}, "
               f"mean {(c + d) / 2:.3f}")
    cell = f"{a:.3f} / .*\\(.*/dpmerf_hi_eps1\\), 391 s; 2 seeds {min(a, b):.3f}-{max(a, b):.3f}, mean {(a + b) / 2:.3f}"
    assert re.fullmatch(rf"\| M \| \[{control} \| \[{cell} \|  \|", m), m


def test_a_noise_free_control_is_refused_where_its_ledger_shows_the_noise_on(tmp_path):
    """G-PATE's first tabular controls ran with privacy off (no budget stop) and DPGradAgg's noise on: their ledgers
    spent eps 3.86 and 3.95 in 1,000 steps. A control whose noise was off spends thousands or more; a ledger that
    recorded nothing says nothing."""
    results = ROOT / "docs/results"
    for name, spent in (("gpate_hi_control", "3.86"), ("gpate_doctor_contacts_control", "3.95")):
        with pytest.raises(ValueError, match=f"noise was on .eps {spent} spent"):
            control_run(results, name)
    for name in ("dpmerf_hi_control", "pategan_doctor_contacts_control", "dpgan_hi_control_eps10",
                 "dpcgan_mnist_control_b1024"):  # DP-CGAN's ledger recorded nothing with privacy off (eps 0)
        assert control_run(results, name)["utility"]


def test_a_rows_experiments_read_as_one_name_where_they_follow_one():
    every = ["d/hi_eps1_guide", "d/dc_eps10_guide", "d/hi_eps10_guide", "d/dc_eps1_guide"]
    assert rerun_names(every, ["hi", "dc"]) == ["d/<table>_eps<e>_guide"]
    assert rerun_names(every[:3], ["hi", "dc"]) == every[:3]  # a missing cell: each name
    assert rerun_names(["p/hi_eps1", "p/hi_eps10_x"], ["hi"]) == ["p/hi_eps1", "p/hi_eps10_x"]


def test_a_goal_is_met_or_short_and_the_control_says_whether_the_noise_or_the_configuration_stops_it():
    assert verdict(96, 0.961, 0.967) == "met"
    assert verdict(98, 0.970, 0.967).startswith("short: its noise-free control is short too")
    assert verdict(98, 0.950, 0.985).startswith("short: its noise-free control reaches the goal")
    assert verdict(98, None, None).startswith("short: its noise-free control reaches the goal")  # nothing measured


def test_the_goals_table_reads_each_cell_its_control_and_the_other_protocol(tmp_path):
    (tmp_path / "cell").symlink_to(ROOT / "docs/results/dpmerf_mnist_eps10_guide_generator")
    (tmp_path / "control").symlink_to(ROOT / "docs/results/dpmerf_mnist_control_guide")
    summary = {"classifiers": ["a", "b"], "val": {"mean": 97.54}}
    (tmp_path / "other.json").write_text(json.dumps({"summary": summary}))
    (tmp_path / "goals.yaml").write_text("goals:\n  - {data: mnist, eps: 10, goal: 98, run: cell, control: control,"
                                         " beside: other.json, limit: the guide}\n")
    header, rule, row = goals_table(tmp_path / "goals.yaml").splitlines()
    cell, control = (load_run(tmp_path / name)["utility"]["private_val"] for name in ("cell", "control"))
    name = tmp_path.name
    assert row == (f"| mnist, 10 | 98 | [{100 * cell:.1f}]({name}/cell), 23 min | "
                   f"[{100 * control:.1f}]({name}/control) | {verdict(98, cell, control)} | the guide | "
                   f"[97.5]({name}/other.json) (a, b) |")
