"""Kill a real training process (SIGKILL) at chosen points, resume it, and check what survived.

A tiny G-PATE whose every query is answered (threshold: 1 of 20 teachers, almost no threshold noise), so its data-independent
epsilon is a function of the query count only and an interrupted-then-resumed run must end with exactly the
ledger of an uninterrupted one. After each kill every file in the run folder is either absent or whole."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inprocess import train_here
from dpgen.callbacks.checkpoint_io import load_checkpoint_file

REPO = Path(__file__).resolve().parents[2]
TINY = ["method=gpate", "data=mnist", "method.n_teachers=20", "method.batch_size=10",
        "method.module.aggregator.sigma1=0.001", "method.module.aggregator.threshold=0.05",
        "privacy.bound=data_independent", "privacy.epsilon=1e12", "trainer.max_steps=6",
        "checkpoint_every_n_steps=2", "samples.every_n_steps=2", "eval=none", "logger=none"]

# Runs train.py after arming one fault: argv = fault, target, train.py overrides...
#   step N:        SIGKILL at the start of training step N
#   after NAME@K:  SIGKILL right after the K-th time NAME was renamed into place
#   during NAME@K: SIGKILL while the K-th write of NAME is half done (its temporary file truncated, not renamed)
RUNNER = r"""
import os, runpy, signal, sys
fault, target, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
name, _, nth = target.partition("@")
seen = {"n": 0}

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if fault == "step":
    from dpgen.methods.gpate import GPATE
    step = GPATE.training_step
    def killing_step(self, batch, batch_idx):
        if self.global_step == int(target):
            die()
        return step(self, batch, batch_idx)
    GPATE.training_step = killing_step
elif fault == "after":
    replace = os.replace
    def killing_replace(src, dst):
        replace(src, dst)
        if os.path.basename(dst) == name:
            seen["n"] += 1
            if seen["n"] == int(nth):
                die()
    os.replace = killing_replace
elif fault == "during":
    fsync = os.fsync
    def killing_fsync(fd):
        written = os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) if isinstance(fd, int) else ""
        if written.startswith(f".{name}.") and written.endswith(".tmp"):
            seen["n"] += 1
            if seen["n"] == int(nth):
                os.ftruncate(fd, os.fstat(fd).st_size // 2)
                die()
        fsync(fd)
    os.fsync = killing_fsync
sys.argv = ["train.py", *overrides]
runpy.run_path("train.py", run_name="__main__")
"""


def killed_run(tmp_path: Path, fault: tuple[str, str]) -> subprocess.CompletedProcess:
    """train.py in its own process, killed at `fault`."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", DPGEN_DATA=str(tmp_path / "no-data-here"))
    cmd = [sys.executable, "-c", RUNNER, *fault, f"hydra.run.dir={tmp_path / 'run'}", *TINY]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def whole_run(tmp_path: Path, *args: str) -> int:
    """train.py run to its end (in this process: only the killed run needs its own); its exit status."""
    return train_here(tmp_path / "run", *TINY, *args, data_root=tmp_path / "no-data-here").returncode


def ledger(run_dir: Path) -> tuple[int, float]:
    privacy = json.loads((run_dir / "privacy.json").read_text())
    return privacy["mechanisms"]["confident_gnmax"]["count"], privacy["epsilon"]


def assert_every_file_whole(run_dir: Path) -> None:
    for path in run_dir.rglob("*"):
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".ckpt":
            load_checkpoint_file(path)
        elif path.name == "generator.pt":
            torch.load(path, weights_only=False)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[int, float]:
    tmp = tmp_path_factory.mktemp("whole")
    assert whole_run(tmp) == 0
    return ledger(tmp / "run")


CASES = {
    "during a step": ("step", "3"),
    "in the middle of writing a checkpoint": ("during", "last.ckpt@2"),
    "right after a checkpoint": ("after", "last.ckpt@1"),
    "in the middle of writing generator.pt": ("during", "generator.pt@1"),
    "in the middle of writing privacy.json": ("during", "privacy.json@1"),
    "in the middle of writing metrics.json": ("during", "metrics.json@1"),
}
FAST = ("during a step", "in the middle of writing a checkpoint")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
@pytest.mark.parametrize("when", [pytest.param(w, marks=() if w in FAST else pytest.mark.slow) for w in CASES])
def test_a_killed_run_resumes_to_the_ledger_of_an_uninterrupted_one(tmp_path, when, uninterrupted):
    killed = killed_run(tmp_path, CASES[when])
    assert killed.returncode == -9, killed.stderr[-3000:]
    run_dir = tmp_path / "run"
    assert_every_file_whole(run_dir)
    assert not (run_dir / "generator.pt").exists() or (run_dir / "privacy.json").exists()  # never released alone
    assert whole_run(tmp_path, f"resume={run_dir / 'checkpoints' / 'last.ckpt'}") == 0
    assert_every_file_whole(run_dir)
    assert ledger(run_dir) == uninterrupted
    assert json.loads((run_dir / "metrics.json").read_text())["steps"] == 6
    assert not list(run_dir.rglob("*.tmp"))  # a killed write's temporary file is gone once the file is rewritten
