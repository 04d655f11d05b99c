"""Thin shim: `python train.py method=gpate data=mnist ...` (see README)."""
from dpgen.cli.train import main

if __name__ == "__main__":
    main()
