"""A check of peers.py's resumable AIM, run in the peers' environment (smartnoise-synth is no dpgen dependency, so
this is no test of make test):

    .cache/peers-venv/bin/python experiments/tabular_peers/check_aim_resume.py

On a small made-up table at eps = 1: a run cut off right after its second round's draws are saved (before that
round's estimate: a KeyboardInterrupt raised after the save) and started again finishes that round and goes on, ends
having used exactly its budget, and samples records in the table's domain; an uninterrupted run ends on the same
budget; the state is refused by a run at another epsilon."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
import peers  # noqa: E402

CARDS = [4, 4, 3]


def table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, 800)
    return pd.DataFrame({"a": a, "b": (a + rng.integers(0, 2, 800)) % 4, "c": rng.integers(0, 3, 800)})


def fit(state: Path, cut_after_saves: int | None = None, epsilon: float = 1.0):
    from snsynth.transform import BinTransformer, TableTransformer

    synth = peers.resumable_aim(state, epsilon=epsilon, delta=1e-5)
    saves, replace = [], os.replace

    def save_then_cut(src, dst):
        replace(src, dst)
        saves.append(dst)
        if len(saves) == cut_after_saves:
            raise KeyboardInterrupt

    peers.os.replace = save_then_cut
    try:
        synth.fit(table(), transformer=TableTransformer([BinTransformer(bins=k, lower=0, upper=k) for k in CARDS]),
                  preprocessor_eps=0.0)
    finally:
        peers.os.replace = replace
    return synth


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        whole = fit(Path(folder) / "whole.pkl")
        assert whole.state["resumed"] == 0 and abs(whole.state["rho_used"] / whole.rho - 1) < 1e-9
        cut = Path(folder) / "cut.pkl"
        try:  # saves: the one-way measurements, round 1's draws, its end, round 2's draws
            fit(cut, cut_after_saves=4)
            raise AssertionError("the run was not cut off")
        except KeyboardInterrupt:
            pass
        import pickle
        saved = pickle.loads(cut.read_bytes())
        assert saved["round"] == 2 and saved["pending"] is not None
        try:
            fit(cut, epsilon=2.0)
            raise AssertionError("a state of other settings was taken")
        except SystemExit as refused:
            assert "other data or settings" in str(refused)
        resumed = fit(cut)
        assert resumed.state["resumed"] == 1 and resumed.state["round"] >= 2 and resumed.state["pending"] is None
        assert abs(resumed.state["rho_used"] / resumed.rho - 1) < 1e-9, resumed.state["rho_used"] / resumed.rho
        sample = np.floor(np.asarray(resumed.sample(200), dtype=float)).astype(int)
        assert sample.shape == (200, 3) and (sample >= 0).all() and (sample < np.array(CARDS)).all()
        print(f"uninterrupted: {whole.state['round']} rounds; cut in round 2 and resumed: "
              f"{resumed.state['round']} rounds; both used exactly their budget")


if __name__ == "__main__":
    main()
