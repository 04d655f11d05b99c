"""Runs several `train.py` configurations side by side (for a machine with cores and a GPU to spare) and prints
one summary line per run.

    python scripts/parallel_runs.py RUNS_FILE OUT_DIR [--parallel 4] [--threads 4] [--extra override ...]

RUNS_FILE: one run per line, `name override override ...`; blank lines and lines starting with # are skipped.
Each run writes to OUT_DIR/<name> (its log to OUT_DIR/<name>.log); OUT_DIR/summary.json holds each run's command,
exit status, wall time and headline metrics (downstream accuracy under each protocol, IS, FID, epsilon).
Started again on the same OUT_DIR (e.g. after a cut-off), it skips the runs that finished (their metrics.json is
there) and resumes those that left a checkpoint (`resume=OUT_DIR/<name>/checkpoints/last.ckpt`, the log appended).
A second runner may share OUT_DIR if its runs file names other runs (to use a core the first leaves idle)."""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dpgen.files import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]


def read_runs(path: Path) -> list[tuple[str, list[str]]]:
    runs = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, *overrides = line.split()
            runs.append((name, overrides))
    names = [n for n, _ in runs]
    if len(set(names)) != len(names):
        raise SystemExit(f"error: run names repeat in {path}: {names}")
    return runs


def pending_runs(runs: list[tuple[str, list[str]]], out: Path) -> list[tuple[str, list[str]]]:
    """The runs still to do in `out`, each with its overrides and, where it left a checkpoint, `resume=` it; those
    that finished (their metrics.json is there) are left out."""
    left = []
    for name, overrides in runs:
        if not (out / name / "metrics.json").is_file():
            checkpoint = out / name / "checkpoints" / "last.ckpt"
            left.append((name, [*overrides, *([f"resume={checkpoint}"] if checkpoint.is_file() else [])]))
    return left


def headline(run_dir: Path) -> dict:
    """The numbers a sweep compares, from the run's metrics.json (absent keys: None)."""
    path = run_dir / "metrics.json"
    if not path.is_file():
        return {}
    m = json.loads(path.read_text())
    down, quality = m.get("downstream") or {}, m.get("image_quality") or {}
    return {"accuracy": down.get("accuracy"),  # that of the run's eval.selection
            "synthetic_accuracy": (down.get("synthetic") or {}).get("accuracy", down.get("accuracy")),
            "private_val_accuracy": (down.get("private_val") or {}).get("accuracy"),
            "max_test_accuracy": down.get("max_test_accuracy"),
            "max_test_epoch": down.get("max_test_epoch"), "IS": quality.get("IS"), "FID": quality.get("FID"),
            "epsilon": (m.get("privacy") or {}).get("epsilon"),
            "wall_time_s": m.get("wall_time_s")}


def record(summary: Path, name: str, line: dict) -> None:
    """Adds (or replaces) `name`'s line in summary.json, read again first: another runner, on a runs file of other
    names, may share the folder and have written its own lines since. The read and the write hold a lock beside the
    file, so two runners finishing at once keep both lines, and the write replaces the file whole (a kill leaves
    the previous one)."""
    with open(summary.with_name(summary.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = json.loads(summary.read_text()) if summary.is_file() else {}
        atomic_write_text(summary, json.dumps({**done, name: line}, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4, help="OMP / torch threads per run")
    parser.add_argument("--extra", nargs="*", default=[], help="overrides added to every run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONUNBUFFERED": "1"}
    summary = args.out / "summary.json"
    runs = read_runs(args.runs)
    pending, running = pending_runs(runs, args.out), []
    for name in sorted({n for n, _ in runs} - {n for n, _ in pending}):
        print(f"finished before: {name}", flush=True)
    while pending or running:
        while pending and len(running) < args.parallel:
            name, overrides = pending.pop(0)
            command = [sys.executable, str(ROOT / "train.py"), *overrides, *args.extra,
                       f"hydra.run.dir={args.out / name}"]
            log = open(args.out / f"{name}.log", "a" if overrides[-1].startswith("resume=") else "w")
            running.append((name, command, time.time(), log, subprocess.Popen(command, stdout=log,
                                                                              stderr=subprocess.STDOUT, env=env)))
            print(f"started {name}: {' '.join(command[1:])}", flush=True)
        time.sleep(2)
        for item in [r for r in running if r[4].poll() is not None]:
            running.remove(item)
            name, command, start, log, proc = item
            log.close()
            line = {"command": " ".join(["python", "train.py", *command[2:]]), "returncode": proc.returncode,
                    "seconds": round(time.time() - start, 1), **headline(args.out / name)}
            print(f"done {name}: {json.dumps(line)}", flush=True)
            record(summary, name, line)


if __name__ == "__main__":
    main()
