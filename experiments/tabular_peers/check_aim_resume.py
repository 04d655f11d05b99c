"""A check of peers.py's resumable AIM, run in the peers' environment (smartnoise-synth is no dpgen dependency, so
this is no test of make test):

    .cache/peers-venv/bin/python experiments/tabular_peers/check_aim_resume.py

On a small made-up table at eps = 1: a run cut off right after its second round's draws are saved (before that
round's estimate: a KeyboardInterrupt raised after the save) and started again finishes that round and goes on, ends
having used exactly its budget, and samples records in the table's domain; an uninterrupted run ends on the same
budget; the state is refused by a run at another epsilon. A state written before the marginal-oracle option (no
`oracles` entry), resumed with oracle "fast", lists smartnoise's oracle from round 0 and "fast" from the round it
resumed in; and the two oracles give the same final model up to float rounding."""
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


def fit(state: Path, cut_after_saves: int | None = None, epsilon: float = 1.0, oracle: str = "stable"):
    from snsynth.transform import BinTransformer, TableTransformer

    synth = peers.resumable_aim(state, oracle=oracle, epsilon=epsilon, delta=1e-5)
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
        old = dict(saved)
        del old["oracles"]  # as a state from before the option
        cut.write_bytes(pickle.dumps(old))
        resumed = fit(cut, oracle="fast")
        assert resumed.state["resumed"] == 1 and resumed.state["round"] >= 2 and resumed.state["pending"] is None
        assert resumed.state["oracles"] == [[0, "stable"], [2, "fast"]], resumed.state["oracles"]
        assert resumed.state.get("stable_fallbacks", 0) == 0
        from mbi import LinearMeasurement, estimation, marginal_oracles
        measured = [LinearMeasurement(y, cl, sd) for y, cl, sd in resumed.state["measurements"]]
        domain = resumed.synthesizer.domain
        models = [estimation.mirror_descent(domain, measured, iters=200, marginal_oracle=oracle)
                  for oracle in (marginal_oracles.message_passing_stable, marginal_oracles.message_passing_fast)]
        gap = max(float(np.max(np.abs(np.asarray(models[0].marginals[cl].values) -
                                      np.asarray(models[1].marginals[cl].values)))) for cl in models[0].cliques)
        assert gap < 1e-6 * len(table()), gap  # counts of 800 records, equal up to float rounding
        assert abs(resumed.state["rho_used"] / resumed.rho - 1) < 1e-9, resumed.state["rho_used"] / resumed.rho
        sample = np.floor(np.asarray(resumed.sample(200), dtype=float)).astype(int)
        assert sample.shape == (200, 3) and (sample >= 0).all() and (sample < np.array(CARDS)).all()
        print(f"uninterrupted: {whole.state['round']} rounds; cut in round 2 and resumed with the fast oracle: "
              f"{resumed.state['round']} rounds; both used exactly their budget; the oracles' marginals differ by "
              f"at most {gap:.2g} of 800 records")


if __name__ == "__main__":
    main()
