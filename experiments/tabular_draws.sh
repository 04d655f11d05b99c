#!/usr/bin/env bash
# G-PATE appendix E's four classifiers on several synthetic draws of each kept table run: the spread that the
# draw of the samples alone puts on a cell's AUROC (one generator, other seeds of generate.py), beside the
# spread between the runs of a configuration. Each draw has as many records as the table's training split.
#   bash experiments/tabular_draws.sh TABLE N_RECORDS OUT_DIR RUN [RUN ...]     # RUN: a folder with generator.pt
#   e.g. bash experiments/tabular_draws.sh doctor_contacts 16106 docs/results/tabular_rows/draws \
#        docs/results/dpmerf_doctor_contacts_eps10_marginals
# DRAWS (default "0 1 2"): generate.py seeds. Writes OUT_DIR/<run>.draw<seed>.gpate.eval.json (evaluate.py output).
set -euo pipefail
table=$1 n=$2 out=$3
shift 3
python=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for run in "$@"; do
  for seed in ${DRAWS:-0 1 2}; do
    dest="$out/$(basename "$run").draw$seed.gpate.eval.json"
    [[ -f $dest ]] && continue
    "$python" generate.py run="$run" n="$n" format=csv out="$tmp/s" seed="$seed" >/dev/null
    "$python" evaluate.py synthetic="$tmp/s/synthetic.csv" data="$table" '~eval.callbacks.image_quality' \
      eval.callbacks.downstream.tabular_models=gpate out="$dest" >/dev/null
    echo "$dest"
  done
done
