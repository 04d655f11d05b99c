"""Checkpoints without a second in-memory copy, written atomically, refused when damaged (callbacks/checkpoint_io)."""
import errno
import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
import torch

from dpgen.callbacks.checkpoint_io import (AtomicCheckpointIO, CheckpointError, atomic_save, load_checkpoint_file,
                                           tensor_bytes)
from dpgen.files import atomic_write_text
from dpgen.nn.ensemble import TeacherEnsemble

# Peak RSS of one checkpoint of a 60-teacher reference ensemble (bf16 moments, ~265 MB), in a fresh process:
# `extra` is the peak after the save minus the RSS just before it, relative to the ensemble's own bytes.
MEASURE = """
import json, sys
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from dpgen.callbacks.checkpoint_io import AtomicCheckpointIO
from dpgen.nn.ensemble import TeacherEnsemble

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

ensemble = TeacherEnsemble(60, (1, 28, 28), 10, moment_dtype="bfloat16")
size = sum(b.numel() * b.element_size() for b in ensemble.buffers())
io = {"atomic": AtomicCheckpointIO, "lightning": TorchCheckpointIO}[sys.argv[1]]()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) restarts here: only what the save allocates counts, not earlier peaks
before = status("VmRSS")
io.save_checkpoint({"state_dict": ensemble.state_dict(), "epoch": 1}, sys.argv[2])
peak = status("VmHWM")
print(json.dumps({"size": size, "extra": peak - before}))
"""


def checkpoint_extra(io: str, path) -> float:
    out = subprocess.run([sys.executable, "-c", MEASURE, io, str(path)], capture_output=True, text=True, check=True)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["size"] > 200e6
    return m["extra"] / m["size"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_checkpoint_of_the_ensemble_allocates_no_second_copy(tmp_path):
    # Lightning's own IO serialises into memory first (about one extra copy): the measurement can see it
    assert checkpoint_extra("lightning", tmp_path / "lightning.ckpt") > 0.9
    assert checkpoint_extra("atomic", tmp_path / "atomic.ckpt") < 0.1
    a = load_checkpoint_file(tmp_path / "atomic.ckpt")["state_dict"]
    b = load_checkpoint_file(tmp_path / "lightning.ckpt")["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_failed_write_keeps_the_previous_checkpoint_and_leaves_no_temporary_file(tmp_path, monkeypatch, caplog):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.arange(5.0)}, path)

    def failing(code):
        def write(obj, f):
            f.write(b"PK\x03\x04 half a checkpoint")
            raise OSError(code, os.strerror(code))
        return write

    monkeypatch.setattr(torch, "save", failing(errno.EACCES))
    with pytest.raises(OSError, match="Permission denied"):  # not a full disk: the error ends the run
        io.save_checkpoint({"step": 2, "w": torch.zeros(5)}, path)
    monkeypatch.setattr(torch, "save", failing(errno.ENOSPC))
    with caplog.at_level(logging.ERROR):  # a full disk: logged, the run goes on
        io.save_checkpoint({"step": 3, "w": torch.zeros(5)}, path)
    assert "NOT written: the disk filled up" in caplog.text and "previous checkpoint there is kept" in caplog.text
    monkeypatch.undo()
    kept = io.load_checkpoint(path)
    assert kept["step"] == 1 and torch.equal(kept["w"], torch.arange(5.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_a_checkpoint_larger_than_the_free_space_is_not_started(tmp_path, monkeypatch, caplog):
    path = tmp_path / "ckpt" / "last.ckpt"
    checkpoint = {"state_dict": {"a": torch.zeros(1000), "view": None}, "opt": [torch.zeros(10, dtype=torch.float64)]}
    checkpoint["state_dict"]["view"] = checkpoint["state_dict"]["a"][:10]  # shares a's storage: counted once
    assert tensor_bytes(checkpoint) == 1000 * 4 + 10 * 8
    free = {"bytes": 4000}
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9, free["bytes"]))
    monkeypatch.setattr(torch, "save", lambda *a: pytest.fail("a write that cannot fit was started"))
    with caplog.at_level(logging.ERROR):
        AtomicCheckpointIO().save_checkpoint(checkpoint, path)
    assert "NOT written: it needs about 0.00 GB" in caplog.text and "no checkpoint exists there yet" in caplog.text
    assert not path.exists()
    monkeypatch.undo()
    free["bytes"] = 4080
    AtomicCheckpointIO().save_checkpoint(checkpoint, path)
    assert path.is_file()


def test_a_write_removes_its_own_stale_temporary_files_only(tmp_path):
    (tmp_path / ".last.ckpt.123.tmp").write_bytes(b"left by a killed writer")
    (tmp_path / ".last.ckpt.rank1.456.tmp").write_bytes(b"process 1 writing its own file (trainer=ddp)")
    atomic_write_text(tmp_path / "last.ckpt", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".last.ckpt.rank1.456.tmp", "last.ckpt"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_damaged_checkpoint_is_refused_with_its_name(tmp_path, damage):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"w": torch.randn(1000)}, path)
    data = path.read_bytes()
    path.write_bytes({"truncate": data[:len(data) // 2], "garbage": b"not a checkpoint" * 10, "empty": b""}[damage])
    with pytest.raises(CheckpointError, match="last.ckpt is truncated or corrupted"):
        load_checkpoint_file(path)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint_file(tmp_path / "nope.ckpt")


# Peak RSS of loading a saved 60-teacher ensemble back into a fresh one (what resume= does), in a fresh process:
# `extra` is the peak during the load minus the RSS of the built (and touched) ensemble, relative to its bytes.
# "chunked" is the ensemble's own load_state_dict (copies a chunk, then gives back the mapped file pages);
# "copy" copies every buffer from the memory-mapped file without giving pages back (the control).
RESUME = """
import json, sys
import torch
from dpgen.callbacks.checkpoint_io import load_checkpoint_file
from dpgen.nn.ensemble import TeacherEnsemble

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

mode, path = sys.argv[1], sys.argv[2]
ensemble = TeacherEnsemble(60, (1, 28, 28), 10, moment_dtype="bfloat16", chunk_size=5)
for b in ensemble.buffers():
    b.add_(1)  # resident, as a trained ensemble is
size = sum(b.numel() * b.element_size() for b in ensemble.buffers())
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) restarts here: only what the load allocates counts, not earlier peaks
before = status("VmRSS")
state = load_checkpoint_file(path)["state_dict"]  # every stack < MAPPED_BYTES: the state dict stays mapped
if mode == "chunked":
    ensemble.load_state_dict(state)
else:
    for name, b in ensemble.state_dict().items():
        b.copy_(state[name])
peak = status("VmHWM")
same = all(torch.equal(b, state[name]) for name, b in ensemble.state_dict().items())
print(json.dumps({"size": size, "extra": peak - before, "same": same}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_resuming_the_ensemble_from_a_mapped_checkpoint_holds_one_copy(tmp_path):
    path = str(tmp_path / "last.ckpt")
    atomic_save({"state_dict": TeacherEnsemble(60, (1, 28, 28), 10, moment_dtype="bfloat16", seed=1).state_dict()},
                path)

    def extra(mode):
        out = subprocess.run([sys.executable, "-c", RESUME, mode, path], capture_output=True, text=True, check=True)
        m = json.loads(out.stdout.strip().splitlines()[-1])
        assert m["same"] and m["size"] > 200e6
        return m["extra"] / m["size"]

    assert extra("copy") > 0.9  # mapped pages count in RSS: the measurement can see a second copy
    assert extra("chunked") < 0.2


def test_file_pages_are_released_and_read_again_but_anonymous_memory_is_never_touched(tmp_path):
    from dpgen.files import release_file_pages

    anonymous = torch.arange(2.0**20)
    assert not release_file_pages(anonymous.data_ptr(), anonymous.numel() * 4)
    assert torch.equal(anonymous, torch.arange(2.0**20))
    torch.save({"w": anonymous}, tmp_path / "w.pt")
    mapped = torch.load(tmp_path / "w.pt", mmap=True)["w"]
    assert mapped.sum() == anonymous.sum()  # every page read once
    assert release_file_pages(mapped.data_ptr(), mapped.numel() * 4)
    assert torch.equal(mapped, anonymous)  # read again from the file


def test_small_tensors_of_a_loaded_checkpoint_are_copied_large_ones_and_the_model_stay_mapped(tmp_path):
    AtomicCheckpointIO().save_checkpoint({"small": [torch.ones(10)], "large": {"w": torch.ones(2**20)},
                                          "state_dict": {"b": torch.ones(10)}}, tmp_path / "c.ckpt")
    loaded = load_checkpoint_file(tmp_path / "c.ckpt", mapped_bytes=2**20)
    from dpgen.files import file_mapping
    assert file_mapping(loaded["large"]["w"].data_ptr()) is not None
    assert file_mapping(loaded["state_dict"]["b"].data_ptr()) is not None  # copied into the model by its load
    assert file_mapping(loaded["small"][0].data_ptr()) is None
    assert torch.equal(loaded["small"][0], torch.ones(10))
