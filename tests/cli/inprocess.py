"""The command-line scripts (train.py, generate.py, evaluate.py, python -m dpgen.audit) run in the test's own
process: Hydra's main, its run folder and logs, about 1 s for a tiny job where a new interpreter, torch and Lightning
take 6-10 s. Tests of what only a separate process shows (a kill, torchrun, page faults, the script file itself)
keep subprocesses."""
from __future__ import annotations

import importlib
import io
import logging
import subprocess
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

MAINS = {"train.py": "dpgen.cli.train", "generate.py": "dpgen.cli.generate", "evaluate.py": "dpgen.cli.evaluate",
         "-m dpgen.audit": "dpgen.audit.__main__"}


def script_here(script: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python <script> *args` run in `cwd` with `env` added, in this process: what the command would return, its
    exit status (SystemExit's code; an exception propagates) and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, own_logging(), redirect_stdout(out), redirect_stderr(err):
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        patch.chdir(cwd)
        patch.setattr(sys, "argv", [script, *args])
        try:
            importlib.import_module(MAINS[script]).main()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
    return subprocess.CompletedProcess([script, *args], code, out.getvalue(), err.getvalue())


@contextmanager
def own_logging():
    """Hydra sets up logging for its job as in a fresh process: `logging.config.dictConfig` closes every handler
    that exists (pytest's own among them) and replaces the root logger's. Here it sees none of the test's, the
    loggers are put back afterwards, and the root handlers the job added (its train.log) are closed, as at a
    process's exit; handlers a library added on import (absl's) stay."""
    loggers = [logging.getLogger(), *(logger for logger in logging.root.manager.loggerDict.values()
                                      if isinstance(logger, logging.Logger))]
    state = [(logger, list(logger.handlers), logger.level, logger.propagate, logger.disabled) for logger in loggers]
    existing = list(logging._handlerList)  # what dictConfig would close
    logging._handlerList.clear()
    try:
        yield
    finally:
        jobs = [handler for handler in logging.getLogger().handlers if handler not in state[0][1]]
        for logger, handlers, level, propagate, disabled in state:
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate, logger.disabled = propagate, disabled
        added = [ref for ref in logging._handlerList if ref() not in jobs]
        logging.shutdown([ref for ref in logging._handlerList if ref() in jobs])  # flushed and closed
        logging._handlerList[:] = existing + added


def train_here(run_dir: Path, *overrides: str, data_root: Path) -> subprocess.CompletedProcess:
    """`python train.py hydra.run.dir=<run_dir> *overrides` with DPGEN_DATA=<data_root>, in this process."""
    return script_here("train.py", f"hydra.run.dir={run_dir}", *overrides, cwd=run_dir.parent,
                       env={"DPGEN_DATA": str(data_root)})
