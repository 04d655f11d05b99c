"""`python -m dpgen.report <multirun dir | run dirs ...>`: the comparison report (dpgen.cli.report)."""
from dpgen.cli.report import cli

if __name__ == "__main__":
    cli()
