"""eval.selection=private_val end to end: train.py never lets the generator read a validation record, and reports the
three accuracies and the selection's privacy line; evaluate.py charges the selection and says so."""
from __future__ import annotations

import json
import shutil

import numpy as np

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
    assert privacy["records"]["private_val"] == {"data": "image_folder", "fraction": 0.4, "seed": 0}
    line = privacy["downstream_selection"]
    assert line["selections"] == 1 and line["epsilon"] == 1000.0  # default: the generator's budget, per selection
    assert line["release"]["epsilon"] == max(privacy["epsilon"], 1000.0)

    # evaluate.py on data of that generator (its privacy.json beside): parallel composition, said in its output
    synthetic = tmp_path / "eval" / "synthetic.npz"
    synthetic.parent.mkdir()
    np.savez(synthetic, x=np.random.default_rng(0).random((40, 1, 28, 28), dtype=np.float32), y=np.arange(40) % 2)
    shutil.copyfile(run / "privacy.json", synthetic.parent / "privacy.json")
    fast = [*data, *SMALL_EVAL, "eval.callbacks.downstream.max_epochs=1"]
    result = script_here("evaluate.py", f"synthetic={synthetic}", *fast, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "charged" in result.stdout and "parallel" in result.stdout
    report = json.loads(synthetic.with_suffix(".eval.json").read_text())
    assert report["downstream"]["private_val"]["epoch"] == 1
    assert report["selection_privacy"]["epsilon"] == privacy["epsilon"]  # default: the generator's epsilon
    assert report["selection_privacy"]["release"]["epsilon"] == privacy["epsilon"]

    # a generator whose data held no split out: the same selection adds up (sequential composition)
    del privacy["records"]
    (synthetic.parent / "privacy.json").write_text(json.dumps(privacy))
    result = script_here("evaluate.py", f"synthetic={synthetic}", *fast, "eval.private_val.epsilon=0.5", cwd=tmp_path)
    assert result.returncode == 0 and "sequential" in result.stdout
    report = json.loads(synthetic.with_suffix(".eval.json").read_text())
    assert report["selection_privacy"]["release"]["epsilon"] == privacy["epsilon"] + 0.5

    # no privacy.json: the selection's budget must be given
    (synthetic.parent / "privacy.json").unlink()
    result = script_here("evaluate.py", f"synthetic={synthetic}", *fast, cwd=tmp_path)
    assert result.returncode == 2 and "eval.private_val.epsilon=<eps>" in result.stdout
