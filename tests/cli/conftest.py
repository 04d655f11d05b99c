"""Fixtures running the command-line scripts in the test's own process (inprocess.py)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inprocess import script_here, train_here


@pytest.fixture
def train_main(capfd):
    """`train_main(tmp_path, *overrides)`: `train_here` into <tmp_path>/run with an empty data root, returning
    what the command would have: a CompletedProcess with the exit status and the printed text."""

    def run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
        capfd.readouterr()
        code = train_here(tmp_path / "run", *overrides, data_root=tmp_path / "no-data-here")
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["train.py", *overrides], code, out, err)

    return run


@pytest.fixture
def script_main(capfd):
    """`script_main(name, tmp_path, *args)`: `python <name> *args` run in tmp_path, in this process; a
    CompletedProcess with the exit status and the printed text."""

    def run(name: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
        capfd.readouterr()
        code = script_here(name, *args, cwd=tmp_path)
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess([name, *args], code, out, err)

    return run
