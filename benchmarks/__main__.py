"""Run every benchmark module of this package (or the ones named): python -m benchmarks [--quick] [name ...]."""
import argparse
import importlib
import pkgutil

import benchmarks
from dpgen.cli.common import machine

parser = argparse.ArgumentParser(prog="python -m benchmarks")
parser.add_argument("names", nargs="*", help="benchmark modules to run (default: all)")
parser.add_argument("--quick", action="store_true", help="small cases only (a couple of minutes in total)")
args = parser.parse_args()
print(f"machine: {machine()}\n", flush=True)
for info in pkgutil.iter_modules(benchmarks.__path__):
    if info.name != "__main__" and (not args.names or info.name in args.names):
        module = importlib.import_module(f"benchmarks.{info.name}")
        if hasattr(module, "main"):  # not the shared helpers (rates.py)
            print(f"## {info.name}\n", flush=True)
            module.main(quick=args.quick)
