"""The logistic-guide probes' data: a table's training split with a fixed fifth held out for scoring, and its
test split, flattened to (n, F) floats."""
import torch

from probe_data import datamodule


def held_out_split(data: str):
    """(tx, ty) the whole training split, (fx, fy) four fifths of it to fit, (vx, vy) the held-out fifth (a fixed
    permutation, seed 1), (sx, sy) the test split."""
    dm = datamodule(data)
    tx, ty = dm.train_data[:]
    sx, sy = dm.test_data[:]
    tx, sx = tx.reshape(len(tx), -1).float(), sx.reshape(len(sx), -1).float()
    perm = torch.randperm(len(tx), generator=torch.Generator().manual_seed(1))
    cut = len(tx) // 5
    return (tx, ty), (tx[perm[cut:]], ty[perm[cut:]]), (tx[perm[:cut]], ty[perm[:cut]]), (sx, sy)
