"""What every run records about where and how it ran (dpgen.cli.common)."""
import sys

import torch

from dpgen.cli.common import command_line, machine


def test_machine_names_the_cpu_model_and_torch_threads():
    text = machine("cpu")
    assert text.startswith("CPU: ") and text.endswith(f", {torch.get_num_threads()} threads")
    assert "unknown" not in text  # /proc/cpuinfo has a model name on Linux


def test_command_line_without_hydra_quotes_the_arguments(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "method=gan", "data.ranges={age:[0, 100]}"])
    assert command_line("train.py") == "python train.py method=gan 'data.ranges={age:[0, 100]}'"
