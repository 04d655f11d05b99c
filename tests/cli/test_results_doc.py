"""docs/RESULTS.md opens with a table generated from docs/results/: it must be what the report makes of those files."""
from pathlib import Path

from dpgen.cli.report import (BEGIN, COMPARISON, COMPARISON_BEGIN, COMPARISON_END, END, comparison_table, find_runs,
                              load_run, markdown_table)

ROOT = Path(__file__).resolve().parents[2]


def test_results_table_is_generated_from_the_kept_run_files(monkeypatch):
    monkeypatch.chdir(ROOT)  # the table names run folders relative to the repository, as `make results` writes it
    runs = find_runs([Path("docs/results")])
    assert runs, "docs/results/ holds no kept run"
    text = (ROOT / "docs" / "RESULTS.md").read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block == "\n" + markdown_table([load_run(run) for run in runs]), (
        "docs/RESULTS.md is out of date: run `python -m dpgen.report docs/results --out docs/`")
    assert all((run / "privacy.json").exists() or load_run(run)["budget"] == float("inf") for run in runs)
    comparison = text.split(COMPARISON_BEGIN, 1)[1].split(COMPARISON_END, 1)[0]
    assert comparison == "\n" + comparison_table(Path("docs/results") / COMPARISON), "the comparison table too"
    assert text.index(COMPARISON_BEGIN) < text.index(BEGIN)  # it opens the page, the full run list below it


def test_readme_opens_with_the_two_commands_and_stays_short():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 10_000
    first_block = text.split("\n\n    ", 1)[1].split("\n\n", 1)[0]
    assert first_block.startswith("make train") and "make test" in first_block
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert "session" not in doc.read_text().lower(), f"{doc.name} speaks of working sessions"
