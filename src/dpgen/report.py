"""`python -m dpgen.report <multirun dir | run dirs ...>`: the comparison report (dpgen.cli.report)."""
import sys

from dpgen.cli.common import console
from dpgen.cli.report import main

if __name__ == "__main__":
    try:
        main()
    except (FileNotFoundError, ValueError) as err:
        console.print(f"[bold red]error:[/] {err}")
        sys.exit(2)
