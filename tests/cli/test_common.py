"""What every run records about where and how it ran, and the configuration readers every command shares
(dpgen.cli.common)."""
import sys

import torch
from omegaconf import OmegaConf

from dpgen.cli.common import command_line, describe_cpu, machine, private_val_share

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse sse2 avx f16c fma avx2 bmi2 sha_ni vaes
"""
SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu avx avx2 avx512f avx512dq avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: another model
flags\t\t: fpu
"""
NO_FLAGS = """processor\t: 0
model name\t: ARMv8 Processor
Features\t: fp asimd sve
"""


def test_machine_names_the_cpu_model_and_torch_threads():
    text = machine("cpu")
    assert text.startswith("CPU: ") and text.endswith(f", {torch.get_num_threads()} threads")
    assert "unknown" not in text  # /proc/cpuinfo has a model name on Linux
    assert f"(torch: {torch.backends.cpu.get_cpu_capability()})" in text


def test_describe_cpu_names_the_model_and_its_matrix_instruction_sets():
    assert describe_cpu(ZEN3) == "AMD EPYC 7B13 (family 25 model 1), AVX2"
    assert describe_cpu(SAPPHIRE_RAPIDS) == ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, "
                                             "AVX2 + AVX-512 + AVX-512 BF16 + AMX + AMX BF16")
    assert describe_cpu(NO_FLAGS) == "ARMv8 Processor"
    assert describe_cpu("") == "unknown CPU"


def test_command_line_without_hydra_quotes_the_arguments(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "method=gan", "data.ranges={age:[0, 100]}"])
    assert command_line("train.py") == "python train.py method=gan 'data.ranges={age:[0, 100]}'"


def test_the_private_validation_split_is_held_only_where_an_evaluation_selects_on_it():
    default = {"selection": "private_val", "private_val": {"fraction": 0.0167}}
    assert private_val_share(OmegaConf.create({"eval": default})) == 0.0167
    assert private_val_share(OmegaConf.create({"eval": {**default, "selection": "synthetic"}})) == 0.0
    # eval=none beside an experiment's selection=private_val (an audit run): nothing evaluated, no split held
    assert private_val_share(OmegaConf.create({"eval": {"selection": "private_val", "callbacks": {}}})) == 0.0
