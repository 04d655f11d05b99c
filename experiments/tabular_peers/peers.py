"""MST and AIM (McKenna et al.; private-pgm's mechanisms as smartnoise-synth packages them) on the project's real
tables, on the same fixed split as the project's methods: a synthetic CSV in the table's own layout per run, which
the project's evaluate.py then scores with the same downstream classifiers.

Runs in its own virtual environment (smartnoise-synth pins an old Opacus and brings JAX; it is no dependency of
dpgen): `bash experiments/tabular_peers/run.sh` builds it and runs this for every cell. By hand:

    .cache/peers-venv/bin/python experiments/tabular_peers/peers.py --table hi --mechanism mst --epsilon 1 \
        --out outputs/tabular_peers/mst_hi_eps1

Inputs: <root>/rtables/<table>_train.csv (`python -m dpgen.data.rtables`), the categories of conf/data/<table>.yaml
and the public bin edges below. Nothing about the domain is read from the records, so the mechanism's own
(epsilon, delta) is the whole cost: every column is given to smartnoise as integer codes 0..k-1 whose number k
is public, with a fixed-bounds transformer that spends nothing (BinTransformer with lower 0, upper k).

Continuous columns: binned with the bin edges below, public round numbers inside the ranges of
conf/data/<table>.yaml (values outside are clipped into the first / last bin as the datamodule clips them); a
synthetic value is drawn uniformly inside its bin (post-processing). Counts whose mass sits near zero get finer
bins there (that visit counts are skewed is general knowledge, not read from the data).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[2]


def steps(low: float, high: float, width: float) -> list[float]:
    return list(np.arange(low, high + width / 2, width))


# Public bin edges per continuous column, inside conf/data/<table>.yaml's ranges
EDGES = {
    "hi": {
        "whrswk": steps(0, 100, 5),            # hours per week, 5-hour bins
        "experience": steps(-10, 70, 5),       # years, 5-year bins
        "kidslt6": steps(0, 10, 1),            # children, one bin per count
        "kids618": steps(0, 10, 1),
        "husby": steps(0, 250, 10),            # thousands of dollars, 10k bins
    },
    "doctor_contacts": {
        "mdu": [0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100],  # visits per year: single counts near zero
        "lc": steps(0, 5, 0.25),
        "lpi": steps(0, 10, 0.5),
        "fmde": steps(0, 10, 0.5),
        "ndisease": steps(0, 100, 2.5),
        "linc": steps(0, 12, 0.5),
        "lfam": steps(0, 3, 0.25),
        "educdec": steps(0, 30, 1),
        "age": steps(0, 100, 5),
    },
}


def data_config(table: str) -> dict:
    return yaml.safe_load((REPO / "conf" / "data" / f"{table}.yaml").read_text())


def encode(frame: pd.DataFrame, cfg: dict, edges: dict) -> tuple[pd.DataFrame, list[int]]:
    """Every column (features then label) as integer codes, and each column's number of codes."""
    codes, cards = {}, []
    for name in cfg["features"] + [cfg["label"]]:
        levels = cfg["classes"] if name == cfg["label"] else (cfg["categorical"] or {}).get(name)
        if levels is not None:
            index = {str(v): i for i, v in enumerate(levels)}
            mapped = frame[name].astype(str).map(index)
            if mapped.isna().any():
                raise ValueError(f"{name}: value {frame[name][mapped.isna()].iloc[0]!r} not among {levels}")
            codes[name], k = mapped.astype(int).to_numpy(), len(levels)
        else:
            e = np.asarray(edges[name], dtype=float)
            low, high = cfg["ranges"][name]
            if not (e[0] == low and e[-1] == high and np.all(np.diff(e) > 0)):
                raise ValueError(f"{name}: bin edges must rise from {low} to {high}, the configured range")
            values = np.clip(frame[name].to_numpy(dtype=float), low, high)
            codes[name], k = np.clip(np.searchsorted(e, values, side="right") - 1, 0, len(e) - 2), len(e) - 1
        cards.append(k)
    return pd.DataFrame(codes), cards


def decode(codes: pd.DataFrame, cfg: dict, edges: dict, rng: np.random.Generator) -> pd.DataFrame:
    """Integer codes back to the table's layout; a continuous value uniform in its bin."""
    out = {}
    for name in cfg["features"] + [cfg["label"]]:
        c = codes[name].to_numpy().astype(int)
        levels = cfg["classes"] if name == cfg["label"] else (cfg["categorical"] or {}).get(name)
        if levels is not None:
            out[name] = np.asarray([str(v) for v in levels], dtype=object)[c]
        else:
            e = np.asarray(edges[name], dtype=float)
            out[name] = e[c] + rng.random(len(c)) * (e[c + 1] - e[c])
    return pd.DataFrame(out)


def resumable_aim(checkpoint: Path, iters: int = 1000, warm_start: bool = False, oracle: str = "stable", **options):
    """smartnoise's AIM whose state is saved in every round, so that a run longer than the machine allows resumes
    where it stopped. The rounds are smartnoise's own (its AIMSynthesizer.AIM, McKenna et al. 2022 Algorithm 1: one-way
    marginals first, then per round an exponential-mechanism choice and a Gaussian measurement, the noise halved when
    a measurement changes the model by less than its noise), built from its helpers. smartnoise re-estimates the
    model from scratch with 1,000 mirror-descent iterations every round (the defaults here); `warm_start` starts each
    round's estimate from the last model, as private-pgm's own AIM does, and `iters` sets its iterations (the first
    and the final estimate keep 1,000): a stated deviation that shortens a long run. `oracle` is the estimate's
    marginal oracle: "stable", smartnoise's (mbi's message_passing_stable), or "fast", mbi's default, which
    private-pgm's own AIM uses (message_passing_fast: the same junction-tree marginals through einsum, about 5 times
    as fast on HI's eps = 10 model at round 59). The two differ only in float rounding, so a run may change oracle
    when it resumes: the state lists from which round each oracle estimated (`oracles`), and an estimate of "fast"
    that is not finite is made again by "stable" (counted in `stable_fallbacks`).
    Estimation is post-processing of the measurements: none of these options changes the privacy cost.

    Privacy of a resumed run: a round's choice and measurement are saved, with the budget they use, right after they
    are drawn and before anything else (the model's estimate, the noise-halving test: post-processing, redone from
    the saved state after a cut). A cut in the short window between the draw and its save loses a draw that nothing
    saw, so only saved rounds count. A state written for other data or settings is refused."""
    import hashlib
    import pickle

    from mbi import LinearMeasurement, estimation, marginal_oracles
    from snsynth.aim.aim import AIMSynthesizer, compile_workload, filter_candidates
    from snsynth.utils import gaussian_noise

    class ResumableAIM(AIMSynthesizer):
        def AIM(self, data, workload):
            def estimate(state, iterations=1000, last=None):
                measured = [LinearMeasurement(y, cl, sd) for y, cl, sd in state["measurements"]]
                start = last.potentials if warm_start and last is not None else None
                for name in dict.fromkeys((oracle, "stable")):
                    model = estimation.mirror_descent(data.domain, measured, iters=iterations, potentials=start,
                                                      marginal_oracle=getattr(marginal_oracles,
                                                                              f"message_passing_{name}"))
                    if all(np.isfinite(np.asarray(model.marginals[cl].values)).all() for cl in model.cliques):
                        break
                    state["stable_fallbacks"] = state.get("stable_fallbacks", 0) + (name != "stable")
                return model

            def measure(cl, sigma):
                x = np.asarray(data.project(cl).datavector())
                return x + np.asarray(gaussian_noise(sigma, x.size)), tuple(cl), float(sigma)

            def save(state):
                state["seconds"] = before + time.time() - start
                partial = checkpoint.with_suffix(".partial")
                partial.write_bytes(pickle.dumps(state))
                os.replace(partial, checkpoint)  # atomic: a crash leaves the previous state

            start = time.time()
            digest = hashlib.sha256(pd.util.hash_pandas_object(data.df, index=False).to_numpy().tobytes())
            key = (f"rho={self.rho!r} max_model_size={self.max_model_size} rounds={self.rounds} iters={iters} "
                   f"warm_start={warm_start} domain={data.domain} data={digest.hexdigest()}")
            candidates = compile_workload(workload)
            answers = {cl: data.project(cl).datavector() for cl in candidates}
            if checkpoint.exists():
                state = pickle.loads(checkpoint.read_bytes())
                if state.get("key") != key:  # names no digest: the data are private
                    raise SystemExit(f"error: {checkpoint} holds an AIM run of other data or settings; remove it "
                                     "to start over")
                state["resumed"] += 1
                state.setdefault("oracles", [[0, "stable"]])  # a state from before the option: smartnoise's
                if state["oracles"][-1][1] != oracle:
                    state["oracles"].append([state["round"], oracle])  # this round's estimate on
                print(f"resumed after round {state['round']}, budget used {state['rho_used'] / self.rho:.3f}, "
                      f"marginal oracle {oracle}")
            else:
                rounds = self.rounds or 16 * len(data.domain)
                sigma = np.sqrt(rounds / (2 * 0.9 * self.rho))
                oneway = [cl for cl in candidates if len(cl) == 1]
                state = {"key": key, "sigma": sigma, "epsilon": np.sqrt(8 * 0.1 * self.rho / rounds), "round": 0,
                         "resumed": 0, "rho_used": len(oneway) * 0.5 / sigma ** 2, "terminate": False,
                         "seconds": 0.0, "pending": None, "oracles": [[0, oracle]],
                         "measurements": [measure(cl, sigma) for cl in oneway]}
            before = state["seconds"]
            save(state)
            # a cut round's estimate from scratch (not warm-started) needs no model before it: skip one estimate
            model = estimate(state) if state["pending"] is None or warm_start else None
            while state["pending"] is not None or not state["terminate"]:
                if state["pending"] is None:
                    sigma, epsilon, rho_used = state["sigma"], state["epsilon"], state["rho_used"]
                    terminate = False
                    if self.rho - rho_used < 2 * (0.5 / sigma ** 2 + 1.0 / 8 * epsilon ** 2):
                        remaining = self.rho - rho_used  # the last round spends what is left
                        sigma, epsilon = np.sqrt(1 / (2 * 0.9 * remaining)), np.sqrt(8 * 0.1 * remaining)
                        terminate = True
                    rho_used += 1.0 / 8 * epsilon ** 2 + 0.5 / sigma ** 2
                    size_limit = self.max_model_size * rho_used / self.rho
                    cl = self._worst_approximated(filter_candidates(candidates, model, size_limit), answers, model,
                                                  epsilon, sigma)
                    z = np.asarray(model.project(cl).datavector())  # the model before this round's measurement
                    state["measurements"].append(measure(cl, sigma))
                    state.update(rho_used=rho_used, terminate=terminate, round=state["round"] + 1,
                                 pending={"clique": tuple(cl), "z": z, "sigma": sigma, "epsilon": epsilon})
                    save(state)  # the round's draws, before anything else
                    print(f"{time.strftime('%H:%M:%S')} round {state['round']}: {cl} size {z.size}, budget used "
                          f"{rho_used / self.rho:.3f}", flush=True)
                pending = state["pending"]
                model = estimate(state, iters, model)
                w = np.asarray(model.project(pending["clique"]).datavector())
                sigma, epsilon = pending["sigma"], pending["epsilon"]
                if np.linalg.norm(w - pending["z"], 1) <= sigma * np.sqrt(2 / np.pi) * w.size:
                    sigma, epsilon = sigma / 2, epsilon * 2
                    print(f"noise halved: sigma {sigma:.4g}", flush=True)
                state.update(sigma=sigma, epsilon=epsilon, pending=None)
                save(state)
            self.rounds_ended = time.time()
            self.synthesizer = estimate(state, 1000, model)
            self.state = state

    return ResumableAIM(**options)


def synthesize(codes: pd.DataFrame, cards: list[int], mechanism: str, epsilon: float, delta: float,
               n: int, state: Path, max_model_size: float | None = None, aim_iters: int = 1000,
               aim_warm_start: bool = False, aim_oracle: str = "stable") -> tuple[pd.DataFrame, dict]:
    from snsynth import Synthesizer
    from snsynth.transform import BinTransformer, TableTransformer

    # integer codes with their public number of values: nothing fitted from the data, no budget spent here
    transformer = TableTransformer([BinTransformer(bins=k, lower=0, upper=k) for k in cards])
    if mechanism == "aim":
        options = {} if max_model_size is None else {"max_model_size": max_model_size}  # its default: 80 MB
        synth = resumable_aim(state, aim_iters, aim_warm_start, aim_oracle, epsilon=epsilon, delta=delta,
                              **options)
    else:
        synth = Synthesizer.create(mechanism, epsilon=epsilon, delta=delta, verbose=True)
    start = time.time()
    synth.fit(codes, transformer=transformer, preprocessor_eps=0.0)
    sample = synth.sample(n)
    frame = pd.DataFrame(sample, columns=codes.columns)
    state = getattr(synth, "state", None)  # AIM's rounds, budget and time across resumptions
    # AIM: its rounds' time in every process (not the part of a round a cut lost), then the final estimate and sample
    run = {"seconds": round(time.time() - start, 1)} if state is None else {
        "seconds": round(state["seconds"] + time.time() - synth.rounds_ended, 1), "rounds": state["round"],
        "resumed": state["resumed"], "budget_used": round(state["rho_used"] / synth.rho, 6),
        "marginal_oracle_from_round": state["oracles"],  # [round, oracle]: from that round's estimate on
        "stable_fallbacks": state.get("stable_fallbacks", 0)}
    # the fixed-bounds transformer returns bin midpoints k + 0.5
    return frame.apply(lambda col: np.floor(col.astype(float)).astype(int).clip(0, None)), run


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, choices=sorted(EDGES))
    parser.add_argument("--mechanism", required=True, choices=["mst", "aim"])
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--n", type=int, default=None, help="synthetic rows (default: as many as the training split)")
    parser.add_argument("--root", type=Path, default=Path(os.environ.get("DPGEN_DATA") or "~/.cache/dpgen"))
    parser.add_argument("--seed", type=int, default=0, help="the uniform draws inside bins (the mechanism's noise "
                                                             "is smartnoise's own)")
    parser.add_argument("--max-model-size", type=float, default=None,
                        help="AIM's cap on its model's size in MB (default: AIM's own, 80); a smaller cap is a stated "
                             "deviation that shortens a long eps = 10 run")
    parser.add_argument("--aim-iters", type=int, default=1000,
                        help="AIM's mirror-descent iterations a round (default smartnoise's 1,000; fewer: a stated "
                             "deviation, with --aim-warm-start)")
    parser.add_argument("--aim-warm-start", action="store_true",
                        help="each AIM round's estimate starts from the last model, as private-pgm's AIM does")
    parser.add_argument("--aim-oracle", choices=["stable", "fast"], default="stable",
                        help="AIM's marginal oracle: smartnoise's message_passing_stable (default) or mbi's default "
                             "message_passing_fast, as private-pgm's own AIM (the same marginals up to float rounding, "
                             "about 5 times as fast on a large model); a resumed run may change it")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--state", type=Path, default=None,
                        help="AIM's state, saved every round (default: <out>/aim_state.pkl; run.sh keeps it in "
                             "carry/, committed, so that a run longer than a machine's life continues on the next). "
                             "A finished state gives a new estimate and sample of the same measurements "
                             "(post-processing) until it is removed, once the cell's result is kept")
    args = parser.parse_args()
    state = args.state or args.out / "aim_state.pkl"
    cfg, edges = data_config(args.table), EDGES[args.table]
    train = pd.read_csv(args.root.expanduser() / cfg["path"])
    codes, cards = encode(train, cfg, edges)
    n = args.n or len(train)
    args.out.mkdir(parents=True, exist_ok=True)
    state.parent.mkdir(parents=True, exist_ok=True)
    synthetic, run = synthesize(codes, cards, args.mechanism, args.epsilon, args.delta, n, state,
                                args.max_model_size, args.aim_iters, args.aim_warm_start, args.aim_oracle)
    decode(synthetic, cfg, edges, np.random.default_rng(args.seed)).to_csv(args.out / "synthetic.csv", index=False,
                                                                           float_format="%.6g")
    from importlib.metadata import version
    info = {"mechanism": args.mechanism, "table": args.table, "epsilon": args.epsilon, "delta": args.delta,
            "rows": n, "train_rows": len(train), "max_model_size": args.max_model_size,
            **({"iters_a_round": args.aim_iters, "warm_start": args.aim_warm_start} if args.mechanism == "aim" else {}),
            "columns": dict(zip(codes.columns, cards)),
            **run, "smartnoise_synth": version("smartnoise-synth"),
            "cpu": cpu_model(), "threads": os.environ.get("OMP_NUM_THREADS")}
    (args.out / "peer.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
