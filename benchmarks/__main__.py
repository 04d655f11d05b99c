"""Run every benchmark module of this package (or the ones named): python -m benchmarks [--quick] [name ...]."""
import argparse
import importlib
import pkgutil

import benchmarks

parser = argparse.ArgumentParser(prog="python -m benchmarks")
parser.add_argument("names", nargs="*", help="benchmark modules to run (default: all)")
parser.add_argument("--quick", action="store_true", help="small cases only (a couple of minutes in total)")
args = parser.parse_args()
for info in pkgutil.iter_modules(benchmarks.__path__):
    if info.name != "__main__" and (not args.names or info.name in args.names):
        print(f"## {info.name}\n", flush=True)
        importlib.import_module(f"benchmarks.{info.name}").main(quick=args.quick)
