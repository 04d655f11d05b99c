"""Checkpoints without a second in-memory copy, written atomically, refused when damaged (callbacks/checkpoint_io)."""
import errno
import json
import subprocess
import sys

import pytest
import torch

from dpgen.callbacks.checkpoint_io import AtomicCheckpointIO, CheckpointError, load_checkpoint_file

# Peak RSS of one checkpoint of a 60-teacher reference ensemble (bf16 moments, ~265 MB), in a fresh process:
# `extra` is the peak after the save minus the RSS just before it, relative to the ensemble's own bytes.
MEASURE = """
import json, resource, sys
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from dpgen.callbacks.checkpoint_io import AtomicCheckpointIO
from dpgen.nn.ensemble import TeacherEnsemble

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

ensemble = TeacherEnsemble(60, (1, 28, 28), 10, moment_dtype="bfloat16")
size = sum(b.numel() * b.element_size() for b in ensemble.buffers())
io = {"atomic": AtomicCheckpointIO, "lightning": TorchCheckpointIO}[sys.argv[1]]()
before = rss()
io.save_checkpoint({"state_dict": ensemble.state_dict(), "epoch": 1}, sys.argv[2])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"size": size, "extra": peak - before}))
"""


def checkpoint_extra(io: str, path) -> float:
    out = subprocess.run([sys.executable, "-c", MEASURE, io, str(path)], capture_output=True, text=True, check=True)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["size"] > 200e6
    return m["extra"] / m["size"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_checkpoint_of_the_ensemble_allocates_no_second_copy(tmp_path):
    # Lightning's own IO serialises into memory first (about one extra copy): the measurement can see it
    assert checkpoint_extra("lightning", tmp_path / "lightning.ckpt") > 0.9
    assert checkpoint_extra("atomic", tmp_path / "atomic.ckpt") < 0.1
    a = load_checkpoint_file(tmp_path / "atomic.ckpt")["state_dict"]
    b = load_checkpoint_file(tmp_path / "lightning.ckpt")["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_failed_write_keeps_the_previous_checkpoint_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.arange(5.0)}, path)

    def disk_full(obj, f):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        io.save_checkpoint({"step": 2, "w": torch.zeros(5)}, path)
    monkeypatch.undo()
    kept = io.load_checkpoint(path)
    assert kept["step"] == 1 and torch.equal(kept["w"], torch.arange(5.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


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
