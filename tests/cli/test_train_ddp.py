"""`torchrun ... train.py trainer=ddp`: G-PATE's teachers split over two CPU processes (gloo) train, with fixed
noise, the same generator with the same ledger as one process holding them all; each process checkpoints and
resumes its own teachers."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dpgen.distributed import rank_path, teacher_slice
from dpgen.nn.ensemble import TeacherEnsemble, key
from inprocess import script_here, train_here

# 7 teachers in B = 2 bins never tie, and at threshold 0.5 (3.5 votes) every query is answered: with almost no
# noise (0.01 of a vote) the votes alone decide every answer, so runs with the same teachers release the same gradients.
TINY_GPATE = ["trainer=ddp", "method=gpate", "method.n_teachers=7", "method.batch_size=4",
              "method.module.teachers.channels=[4,4]", "method.module.teachers.hidden=8",
              "+method.module.generator.fc_dim=32", "+method.module.generator.start_channels=8",
              "method.module.aggregator.bins=2", "method.module.aggregator.clip=1e-6",
              "method.module.aggregator.sigma1=0.01", "method.module.aggregator.sigma2=0.01",
              "eval=none", "logger=csv", "samples.every_n_steps=0", "checkpoint_every_n_steps=2",
              "progress_log_every_seconds=0", "privacy.epsilon=1e12", "privacy.bound=data_independent"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# train.py with DPGradAgg's secret randomness (projections and noise) drawn from a fixed seed: a test only, so
# that runs can be compared; process 0 alone draws from it.
FIXED_NOISE_TRAIN = """
import torch
import dpgen.methods.gpate
dpgen.methods.gpate.secret_generator = lambda device=None: torch.Generator(device or "cpu").manual_seed(5)
from dpgen.cli.train import main
main()
"""


def torchrun(processes: int, run: Path, *overrides: str) -> subprocess.CompletedProcess:
    script = run.parent / "fixed_noise_train.py"
    script.write_text(FIXED_NOISE_TRAIN)
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", DPGEN_DATA=str(run.parent / "no-data"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port",
           str(free_port()), str(script), f"hydra.run.dir={run}", *TINY_GPATE, *overrides]
    result = subprocess.run(cmd, cwd=run.parent, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def generator_weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "generator.pt", weights_only=False)["generator"].state_dict()


def test_teacher_slices_cover_every_teacher_once():
    for n, world in [(7, 2), (4000, 3), (5, 5)]:
        slices = [teacher_slice(n, r, world) for r in range(world)]
        rows = [t for first, count in slices for t in range(first, first + count)]
        assert rows == list(range(n)) and max(c for _, c in slices) - min(c for _, c in slices) <= 1
    assert rank_path("a/last.ckpt", 0) == "a/last.ckpt" and rank_path("a/last.ckpt", 2) == "a/last.ckpt.rank2"


@pytest.fixture(scope="session")
def one_and_two(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny G-PATE for 3 steps in one torchrun process (all teachers) and in two. Session-scoped: a worker that
    runs other modules' tests between the two that use it would tear a module-scoped fixture down and make the
    runs again (44 s)."""
    tmp = tmp_path_factory.mktemp("ddp")
    one, two = tmp / "one", tmp / "two"
    torchrun(1, one, "trainer.max_steps=3")
    torchrun(2, two, "trainer.max_steps=3")
    return one, two


@pytest.mark.xdist_group("ddp")  # one worker computes the module's runs once
def test_two_processes_train_as_one_and_resume_their_own_teachers(one_and_two):
    one, two = one_and_two
    # process 0 alone writes the run's files; every process its checkpoint (its own teachers)
    assert (two / "checkpoints" / "last.ckpt").is_file() and (two / "checkpoints" / "last.ckpt.rank1").is_file()
    assert not (one / "checkpoints" / "last.ckpt.rank1").exists()
    metrics = [json.loads((run / "metrics.json").read_text()) for run in (one, two)]
    assert [m["steps"] for m in metrics] == [3, 3] and "2 x 1 threads" in metrics[1]["machine"]
    privacy = [json.loads((run / "privacy.json").read_text()) for run in (one, two)]
    gnmax = [p["mechanisms"]["confident_gnmax"] for p in privacy]
    assert gnmax[0]["count"] == gnmax[1]["count"] == 3 * 4 * 10  # every query recorded once, not once per process
    assert privacy[0]["epsilon"] == privacy[1]["epsilon"] > 0
    w1, w2 = generator_weights(one), generator_weights(two)
    for name in w1:  # the same released gradients each step: the same generator
        torch.testing.assert_close(w2[name], w1[name], rtol=1e-4, atol=1e-6, msg=name)
    teachers = [torch.load(rank_path(two / "checkpoints" / "last.ckpt", r), weights_only=False)["state_dict"]
                for r in (0, 1)]
    held = [t["ensemble.params.fc_weight"].shape[0] for t in teachers]
    assert held == [3, 4]  # teachers 0-2 and 3-6
    whole = torch.load(one / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    # the same teachers, trained alike, in every weight an output depends on: the biases BatchNorm subtracts again
    # get rounding noise for gradients, which Adam makes steps of +-lr that one and two processes round differently
    inert = {f"ensemble.params.{key(name)}" for name in TeacherEnsemble(1, (1, 28, 28), 10, channels=[4, 4]).inert}
    assert inert == {"ensemble.params.convs_1_bias", "ensemble.params.fc_bias"}
    for name in (k for k in whole if k.startswith("ensemble.params.") and k not in inert):
        torch.testing.assert_close(torch.cat([t[name] for t in teachers]), whole[name], rtol=1e-4, atol=1e-6, msg=name)

    # the step-2 checkpoint (every 2 steps) continues to step 4 with its ledger: 4 steps recorded, each once
    torchrun(2, two, "trainer.max_steps=4", f"resume={two / 'checkpoints' / 'last.ckpt'}")
    assert json.loads((two / "metrics.json").read_text())["steps"] == 4
    assert json.loads((two / "privacy.json").read_text())["mechanisms"]["confident_gnmax"]["count"] == 4 * 4 * 10


@pytest.mark.xdist_group("ddp")
def test_a_checkpoint_of_two_processes_does_not_resume_in_one(tmp_path, one_and_two):
    two = one_and_two[1]
    result = train_here(tmp_path / "run", *TINY_GPATE[1:], "trainer.max_steps=5",
                        f"resume={two / 'checkpoints' / 'last.ckpt'}", data_root=tmp_path / "no-data")
    assert result.returncode == 2
    assert "holds the teachers of 2 process(es)" in result.stdout + result.stderr


def test_methods_that_cannot_split_refuse_several_processes(tmp_path):
    # as the first of two processes torchrun started (the refusal comes before any process group is made)
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "DPGEN_DATA": str(tmp_path / "no-data")}
    result = script_here("train.py", f"hydra.run.dir={tmp_path / 'run'}", "trainer=ddp", "method=dpgan",
                         "trainer.max_steps=1", "eval=none", cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "method=dpgan runs in one process" in result.stdout
    assert not (tmp_path / "run" / "checkpoints").exists()
