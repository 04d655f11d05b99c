"""DPGradAgg over teachers split between two processes (torch.distributed, gloo) equals one process."""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import torch

from dpgen.aggregation.dpgradagg import DPGradAggParams, dp_grad_agg
from dpgen.nn.ensemble import TeacherEnsemble
from dpgen.privacy.rdp import DEFAULT_ORDERS

TEACHERS, BATCH, SHAPE, CLASSES = 6, 4, (1, 8, 8), 3
AGG = dict(clip=2e-3, bins=4, proj_dim=3, sigma1=0.5, sigma2=0.5, threshold=0.5)
NOISE_SEED = 5

# One process's share: teachers first..first+2 of the 6, two training steps, one aggregation; JSON out.
WORKER = """
import json, sys
import numpy as np, torch
from torch import distributed as dist
sys.path.insert(0, sys.argv[1])
from test_dpgradagg_distributed import run
from dpgen.distributed import leave_process_group
dist.init_process_group("gloo")
rank = dist.get_rank()
print(json.dumps(run(first=3 * rank, count=3, distributed=True)))
leave_process_group()
"""


def data():
    g = torch.Generator().manual_seed(0)
    steps = [(torch.rand(TEACHERS, BATCH, *SHAPE, generator=g), torch.randint(0, CLASSES, (TEACHERS, BATCH), generator=g),
              torch.rand(BATCH, *SHAPE, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g))
             for _ in range(2)]
    return steps


def run(first: int, count: int, distributed: bool) -> dict:
    """Teachers first..first+count-1 of the ensemble: two Adam steps, then DPGradAgg of their input gradients."""
    ens = TeacherEnsemble(count, SHAPE, CLASSES, channels=[4, 4], hidden=8, seed=1, first=first)
    for real_x, real_y, fake_x, fake_y in data():
        ens.train_step(real_x[first:first + count], real_y[first:first + count], fake_x, fake_y)
    grads = -ens.input_grads(fake_x, fake_y)
    noise = torch.Generator().manual_seed(NOISE_SEED)  # only rank 0's is drawn from when distributed
    private, release = dp_grad_agg(grads, DPGradAggParams(**AGG), np.asarray(DEFAULT_ORDERS, dtype=float), noise,
                                   shape=SHAPE, distributed=distributed)
    return {"private": private.tolist(), "votes": release.votes.tolist(), "answered": release.answered.tolist(),
            "rdp": {k: v.tolist() for k, v in release.rdp.items()}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_give_the_votes_answers_and_privacy_cost_of_one():
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2",
               OMP_NUM_THREADS="1")
    here = os.path.dirname(__file__)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, here], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    ranks = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    one = run(first=0, count=TEACHERS, distributed=False)
    votes = np.asarray(one["votes"])
    assert (votes.sum(1) == TEACHERS).all() and 0 < np.mean(one["answered"]) < 1  # all 6 teachers vote; a mix
    for r in ranks:
        assert r["votes"] == one["votes"] and r["answered"] == one["answered"]
        np.testing.assert_allclose(r["private"], one["private"], rtol=1e-6, atol=1e-12)
        for bound in one["rdp"]:
            np.testing.assert_array_equal(r["rdp"][bound], one["rdp"][bound])
