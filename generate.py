"""Thin shim: `python generate.py run=<run folder> n=60000 format=npz` (see README)."""
from dpgen.cli.generate import main

if __name__ == "__main__":
    main()
