"""What the entry points share: where the configs are, which errors are the user's, how results print."""
from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException, InstantiationException
from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table

from dpgen.callbacks.downstream import flatten
from dpgen.callbacks.checkpoint_io import CheckpointError
from dpgen.callbacks.privacy_budget import BudgetError
from dpgen.data.errors import DataError
from dpgen.data.split import config_sha256
from dpgen.memory import reuse_freed_memory

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # package data; the repository's conf/ links here
# Errors caused by input or configuration: printed as one clear message, without a traceback.
USER_ERRORS = (DataError, BudgetError, CheckpointError)
console = Console()
# PATE-TripleGAN's data split: round(teachers / labelled fraction) partitions, the first `teachers` labelled
OmegaConf.register_new_resolver("partitions", lambda teachers, percent: round(teachers / percent), replace=True)


def private_val_share(cfg) -> float:
    """The share of the training records the datamodule holds out as the private validation split: that of
    `eval.private_val.fraction` with eval.selection=private_val, else none. An evaluation without that section
    (eval=none, as audits run, beside an experiment's selection) evaluates nothing and holds none."""
    evaluation = cfg.get("eval") or {}
    if evaluation.get("selection") != "private_val" or not evaluation.get("private_val"):
        return 0.0
    return float(evaluation.private_val.fraction)


def data_hash(cfg) -> str:
    """The hash of the run's resolved data configuration (data.split.config_sha256): part of the private validation
    split's descriptor, so that a split is matched by what selects its records, not by the data set's name."""
    return config_sha256(OmegaConf.to_container(cfg.data, resolve=True))


def config_file(run: Path) -> Path | None:
    """The resolved configuration of a run folder (train.py's) or of a kept run (`--keep`)."""
    return next((p for p in (run / ".hydra" / "config.yaml", run / "config.yaml") if p.exists()), None)


def fail(message: str) -> None:
    """A user's mistake: one error line, exit status 2."""
    console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    sys.exit(2)


def run_job(job, cfg, user_errors: tuple[type[BaseException], ...] = USER_ERRORS) -> None:
    """`job(cfg)`, with the user's mistakes (`user_errors`, a config value a class refused) as one error line."""
    reuse_freed_memory()
    try:
        job(cfg)
    except user_errors as err:
        fail(str(err))
    except InstantiationException as err:
        message = bad_value(err)
        if message is None:
            raise
        fail(message)


def bad_value(err: InstantiationException) -> str | None:
    """`<config key>: <reason>` when a config value was refused by the class it configures (a ValueError or
    TypeError raised while Hydra instantiated it), else None: then it is not the user's mistake."""
    if not isinstance(err.__cause__, (ValueError, TypeError)):
        return None
    key = re.search(r"full_key: (\S+)", str(err))
    return f"{key.group(1) if key else 'configuration'}: {err.__cause__}"


def check_config(config_name: str, argv: list[str] | None = None) -> None:
    """Compose the configuration as Hydra is about to, so that an unknown option, a bad override or a required
    value left unset is one error line naming the key (exit 2) instead of Hydra's block. Command lines with
    Hydra flags (--multirun, --cfg, --help, ...) are left to Hydra."""
    argv = sys.argv[1:] if argv is None else argv
    if any(arg.startswith("-") for arg in argv):
        return
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name, overrides=argv)
    except HydraException as err:
        lines = [line.strip() for line in str(err).splitlines()
                 if line.strip() and not line.strip().startswith(("full_key", "object_type", "Available options"))]
        if err.__cause__ is not None:  # e.g. "Key 'x' is not in struct": the reason, before Hydra's advice
            lines.insert(1, str(err.__cause__).splitlines()[0])
        options = getattr(err, "options", None)
        if options:
            lines = [lines[0], f"choose one of: {', '.join(sorted(options))}"]
        fail((f"{err.override}: " if getattr(err, "override", None) else "") + "; ".join(lines))
    missing = sorted(missing_keys(OmegaConf.to_container(cfg, resolve=False)))
    if missing:
        fail(f"{', '.join(missing)} must be given: add {' '.join(f'{key}=<value>' for key in missing)} to the command")


def missing_keys(tree, prefix: str = "") -> list[str]:
    """Keys whose value is OmegaConf's ??? (required, no default), without resolving interpolations."""
    if isinstance(tree, dict):
        return [k for key, value in tree.items() for k in missing_keys(value, f"{prefix}{key}.")]
    return [prefix[:-1]] if tree == "???" else []


def machine(accelerator: str = "cpu", processes: int = 1) -> str:
    """What a run ran on, for its results: the GPU's name, or the CPU's model, its matrix instruction sets
    (`describe_cpu`), the one torch's kernels use, and the threads torch used (per process, and how many
    processes when there were several)."""
    import torch

    times = f"{processes} x " if processes > 1 else ""
    if accelerator in ("gpu", "cuda") and torch.cuda.is_available():
        return f"GPU: {times}{torch.cuda.get_device_name()}"
    cpuinfo = Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
    return (f"CPU: {describe_cpu(cpuinfo)} (torch: {torch.backends.cpu.get_cpu_capability()}), "
            f"{times}{torch.get_num_threads()} threads")


# /proc/cpuinfo flags of the instruction sets that matrix products use, and how to name them
MATRIX_FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX-512 BF16", "amx_tile": "AMX",
                "amx_bf16": "AMX BF16"}


def describe_cpu(cpuinfo: str) -> str:
    """'<model> (family F model M), <instruction sets>' from the text of /proc/cpuinfo (its first processor), e.g.
    'AMD EPYC (family 25 model 1), AVX2' (Zen 3; a virtual machine's model name may not say more) or
    'Intel(R) Xeon(R) Platinum 8481C (family 6 model 143), AVX2 + AVX-512 + AVX-512 BF16 + AMX + AMX BF16'; the
    model only where there is no x86 family or flags line."""
    fields = {}
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    features = " + ".join(label for flag, label in MATRIX_FLAGS.items() if flag in flags)
    model = fields.get("model name") or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        model += f" (family {fields['cpu family']} model {fields['model']})"
    return f"{model}, {features}" if features else model


def command_line(script: str) -> str:
    """The command that started this run: `python <script>` and its Hydra overrides."""
    from hydra.core.hydra_config import HydraConfig

    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else sys.argv[1:]
    return " ".join(["python", script, *map(shlex.quote, overrides)])


def metric_rows(results: dict) -> list[tuple[str, str]]:
    """The evaluation numbers of a results dict, one (name, value) row each."""
    rows = []
    for key in ("downstream", "image_quality"):
        for name, value in flatten(results.get(key) or {}, key).items():
            if not name.endswith("/step") and "/settings/" not in name:  # how it was measured: in the file
                rows.append((name, f"{value:.4g}"))
    return rows


def print_metrics(title: str, results: dict, out: Path) -> None:
    table = Table(title=title, show_header=False)
    for name, value in metric_rows(results):
        table.add_row(name, value)
    table.add_row("written to", str(out))
    console.print(table)
