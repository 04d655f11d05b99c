"""Thin shim: `python evaluate.py synthetic=<file> data=<name>` (see README)."""
from dpgen.cli.evaluate import main

if __name__ == "__main__":
    main()
