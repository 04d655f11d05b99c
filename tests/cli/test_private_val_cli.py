"""eval.selection=private_val end to end: train.py never lets the generator read a validation record, and reports the
three accuracies and the selection's privacy line; evaluate.py charges the selection and says so."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from dpgen.data import base, partition
from inprocess import script_here
from test_train_cli import TINY_PRIVATE, tiny_images, train

SMALL_EVAL = ["eval.selection=private_val", "eval.private_val.fraction=0.4", "~eval.callbacks.image_quality",
              "eval.callbacks.downstream.n_samples=60", "eval.callbacks.downstream.max_epochs=2"]
MARK = 255  # a validation record is overwritten with white pixels once it is held out: no tiny image is white


def test_a_training_run_with_private_val_never_reads_a_validation_record(tmp_path, monkeypatch):
    split, read, marked = base.private_val_split, [], []

    def split_then_mark(records, fraction, seed):
        kept, held = split(records, fraction, seed)
        records[held] = MARK  # the loaded records, before the split's copies are made
        marked.append(len(held))
        return kept, held

    def tracked(self, idx):  # every teacher batch the generator's training reads
        x, y = getitem(self, idx)
        read.append(x.flatten(2).eq(MARK).all(-1).any().item())
        return x, y

    getitem = partition.TeacherRecords.__getitem__
    monkeypatch.setattr(base, "private_val_split", split_then_mark)
    monkeypatch.setattr(partition.TeacherRecords, "__getitem__", tracked)
    data = tiny_images(tmp_path)
    result = train(tmp_path, "method=gpate", *TINY_PRIVATE["gpate"], *data, "trainer.max_steps=2", "privacy.epsilon=1000",
                   "samples.every_n_steps=0", "checkpoint_every_n_steps=0", *SMALL_EVAL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert marked[0] > 0 and read and not any(read)  # teacher batches were read, none held a validation record
    run = tmp_path / "run"
    downstream = json.loads((run / "metrics.json").read_text())["downstream"]
    assert downstream["selection"] == "private_val" and downstream["accuracy"] == downstream["private_val"]["accuracy"]
    assert all(1 <= downstream[key]["epoch"] <= 2 for key in ("synthetic", "private_val", "test"))
    privacy = json.loads((run / "privacy.json").read_text())
    held_out = privacy["records"]["private_val"]
    assert {k: held_out[k] for k in ("data", "fraction", "seed")} == {"data": "image_folder", "fraction": 0.4,
                                                                       "seed": 0}
    assert len(held_out["config_sha256"]) == 64  # the data configuration's hash, not the data's
    line = privacy["downstream_selection"]
    assert line["selections"] == 1 and line["epsilon"] == 1000.0  # default: the generator's budget, per selection
    assert line["release"]["epsilon"] == max(privacy["epsilon"], 1000.0)
    assert "epoch" not in (run / "logs" / "version_0" / "metrics.csv").read_text().splitlines()[0].split(",")

    # evaluate.py on data of that generator (its privacy.json beside), twice: each selection is charged before it
    # is made, in selections.jsonl beside the file, and all of them add up (parallel with the generator)
    synthetic = tmp_path / "eval" / "synthetic.npz"
    synthetic.parent.mkdir()
    np.savez(synthetic, x=np.random.default_rng(0).random((40, 1, 28, 28), dtype=np.float32), y=np.arange(40) % 2)
    shutil.copyfile(run / "privacy.json", synthetic.parent / "privacy.json")
    fast = [*data, *SMALL_EVAL, "eval.callbacks.downstream.max_epochs=1"]
    for selections in (2, 3):
        result = script_here("evaluate.py", f"synthetic={synthetic}", *fast, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "charged" in result.stdout and "parallel" in result.stdout
        report = json.loads(synthetic.with_suffix(".eval.json").read_text())
        assert report["downstream"]["private_val"]["epoch"] == 1
        selection = report["selection_privacy"]
        assert selection["selections"] == selections and selection["epsilon"] == 1000.0 * selections
        assert selection["release"]["epsilon"] == 1000.0 * selections  # max(eps_gen, sum of the selections)
        assert [c["by"] for c in selection["charges"]] == ["train.py"] + ["evaluate.py"] * (selections - 1)
    logged = [json.loads(line) for line in (synthetic.parent / "selections.jsonl").read_text().splitlines()]
    assert [c["epsilon"] for c in logged] == [1000.0, 1000.0] and all(c["split"] == held_out for c in logged)

    # a stated budget for all selections on this release: one more at 1000 would pass 3500, refused, nothing charged
    result = script_here("evaluate.py", f"synthetic={synthetic}", *fast, "eval.private_val.budget=3500", cwd=tmp_path)
    assert result.returncode == 2 and "eval.private_val.budget=3500" in result.stdout
    assert len((synthetic.parent / "selections.jsonl").read_text().splitlines()) == 2

    # another split (the data configuration differs): this selection and the earlier ones add up with the generator
    other = script_here("evaluate.py", f"synthetic={synthetic}", *fast, "eval.private_val.epsilon=0.5",
                        "data.image_size=[28,28]", cwd=tmp_path)
    assert other.returncode == 0 and "sequential" in other.stdout, other.stdout + other.stderr
    report = json.loads(synthetic.with_suffix(".eval.json").read_text())
    assert report["selection_privacy"]["release"]["epsilon"] == pytest.approx(privacy["epsilon"] + 3000.5)

    # a generator whose privacy.json states no budget (no guarantee): the selection's epsilon must be given
    (synthetic.parent / "privacy.json").write_text(json.dumps({"private": False, "guarantee": "none"}))
    result = script_here("evaluate.py", f"synthetic={synthetic}", *fast, cwd=tmp_path)
    assert result.returncode == 2 and "eval.private_val.epsilon=<eps>" in result.stdout

    # no privacy.json: the selection's budget must be given
    (synthetic.parent / "privacy.json").unlink()
    result = script_here("evaluate.py", f"synthetic={synthetic}", *fast, cwd=tmp_path)
    assert result.returncode == 2 and "eval.private_val.epsilon=<eps>" in result.stdout
