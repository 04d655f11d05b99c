"""`python -m dpgen.reference_eval RUN [RUN ...]`: the G-PATE authors' evaluation of released generators
(dpgen.cli.reference_eval)."""
from dpgen.cli.reference_eval import cli

if __name__ == "__main__":
    cli()
