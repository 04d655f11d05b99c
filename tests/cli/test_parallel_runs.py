"""scripts/parallel_runs.py: its runs file and the summary line it keeps of each run."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "parallel_runs.py"
spec = importlib.util.spec_from_file_location("parallel_runs", SCRIPT)
parallel_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(parallel_runs)


def test_the_runs_file_is_a_name_and_its_overrides_per_line(tmp_path):
    runs = tmp_path / "runs"
    runs.write_text("# a comment\n\nbase method=dpmerf data=mnist\nconv method=dpmerf +x={a:1,b:[2,3]}\n")
    assert parallel_runs.read_runs(runs) == [("base", ["method=dpmerf", "data=mnist"]),
                                             ("conv", ["method=dpmerf", "+x={a:1,b:[2,3]}"])]
    runs.write_text("a x=1\na x=2\n")
    with pytest.raises(SystemExit, match="repeat"):
        parallel_runs.read_runs(runs)


def test_the_summary_keeps_all_three_accuracies_and_none_for_what_a_run_lacks(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({
        "downstream": {"accuracy": 0.95, "synthetic": {"accuracy": 0.94}, "private_val": {"accuracy": 0.95},
                       "max_test_accuracy": 0.96, "max_test_epoch": 3},
        "image_quality": {"IS": 8.4, "FID": 16.0}, "privacy": {"epsilon": {"data_independent": 1.0}},
        "wall_time_s": 600.0}))
    line = parallel_runs.headline(tmp_path)
    assert (line["synthetic_accuracy"], line["private_val_accuracy"], line["max_test_accuracy"]) == (0.94, 0.95, 0.96)
    assert line["IS"] == 8.4 and line["epsilon"] == {"data_independent": 1.0}
    (tmp_path / "metrics.json").write_text(json.dumps({"downstream": {"accuracy": 0.5}}))
    line = parallel_runs.headline(tmp_path)
    assert line["synthetic_accuracy"] == 0.5 and line["private_val_accuracy"] is None and line["FID"] is None
    assert parallel_runs.headline(tmp_path / "unfinished") == {}


def test_a_second_start_skips_finished_runs_and_resumes_checkpointed_ones(tmp_path):
    runs = [("done", ["method=dpgan"]), ("cut", ["method=dpgan", "data=mnist"]), ("fresh", ["method=dpcgan"])]
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "metrics.json").write_text("{}")
    (tmp_path / "cut" / "checkpoints").mkdir(parents=True)
    (tmp_path / "cut" / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert parallel_runs.pending_runs(runs, tmp_path) == [
        ("cut", ["method=dpgan", "data=mnist", f"resume={tmp_path / 'cut' / 'checkpoints' / 'last.ckpt'}"]),
        ("fresh", ["method=dpcgan"])]


def test_a_run_s_line_joins_the_lines_another_runner_wrote_in_the_meantime(tmp_path):
    summary = tmp_path / "summary.json"
    parallel_runs.record(summary, "a", {"returncode": 0})
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "b": {"returncode": 1}}))  # the other runner
    parallel_runs.record(summary, "c", {"returncode": 0})
    parallel_runs.record(summary, "a", {"returncode": 2})
    assert json.loads(summary.read_text()) == {"a": {"returncode": 2}, "b": {"returncode": 1}, "c": {"returncode": 0}}
