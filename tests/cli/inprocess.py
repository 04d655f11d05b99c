"""The command-line scripts (train.py, generate.py, evaluate.py) run in the test's own process: Hydra's main, its
run folder and logs, about 1 s for a tiny job where a new interpreter, torch and Lightning take 6-10 s. Tests of
what only a separate process shows (a kill, torchrun, page faults, the script file itself) keep subprocesses."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

MAINS = {"train.py": "dpgen.cli.train", "generate.py": "dpgen.cli.generate", "evaluate.py": "dpgen.cli.evaluate"}


def script_here(script: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> int:
    """`python <script> *args` run in `cwd` with `env` added, in this process; returns its exit status
    (SystemExit's code; an exception propagates)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        patch.chdir(cwd)
        patch.setattr(sys, "argv", [script, *args])
        try:
            importlib.import_module(MAINS[script]).main()
        except SystemExit as stop:
            return stop.code if isinstance(stop.code, int) else 1
    return 0


def train_here(run_dir: Path, *overrides: str, data_root: Path) -> int:
    """`python train.py hydra.run.dir=<run_dir> *overrides` with DPGEN_DATA=<data_root>, in this process."""
    return script_here("train.py", f"hydra.run.dir={run_dir}", *overrides, cwd=run_dir.parent,
                       env={"DPGEN_DATA": str(data_root)})
