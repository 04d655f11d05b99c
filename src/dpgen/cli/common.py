"""What the entry points share: where the configs are, which errors are the user's, the end-of-run summary."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from dpgen.callbacks.privacy_budget import BudgetError
from dpgen.data.errors import DataError

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
# Errors caused by input or configuration: printed as one clear message, without a traceback.
USER_ERRORS = (DataError, BudgetError)
console = Console()


def print_summary(out: Path, results: dict, grid: Path | None) -> None:
    table = Table(title=f"{results['method']} on {results['data']}", show_header=False)
    table.add_row("run folder", str(out))
    table.add_row("steps / wall time", f"{results['steps']} / {results['wall_time_s']:.0f} s")
    privacy = results["privacy"]
    if privacy["private"]:
        for bound, eps in privacy["epsilon"].items():
            gov = " (governing)" if bound == privacy["governing_bound"] else ""
            table.add_row(f"epsilon, {bound}{gov}", f"{eps:.4g} at delta={privacy['delta']:g}")
    else:
        table.add_row("privacy", privacy["note"])
    for key, value in results.items():
        if key.startswith(("accuracy", "fid", "is", "auroc", "auprc")) or key == "losses":
            table.add_row(key, str(value))
    if grid:
        table.add_row("samples", str(grid))
    table.add_row("generator", str(out / "generator.pt"))
    console.print(table)
