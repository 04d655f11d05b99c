#!/usr/bin/env bash
# The seed's table under its authors' evaluation (docs/EVALUATION.md, eval=reference): every cell of
# experiments/authors_eval.runs trained again from its experiment file (scripts/parallel_runs.py: resumes a run cut
# off), kept with its generator as docs/results/<name>_generator, then each cell kept but not yet evaluated scored by
# `python -m dpgen.reference_eval` (one cell a call: on a CPU several together are no faster; it resumes from its
# state file). Each step skips what is done, so after an interruption the same command continues. From the
# repository root:
#   bash experiments/authors_eval.sh
# PYTHON (default .venv/bin/python), THREADS (default 2), OUT (default outputs/authors_eval), RUNS (default
# experiments/authors_eval.runs). The comparison's cells (docs/results/comparison.yaml) are switched to the new kept
# runs by hand, after a look at them.
set -euo pipefail
python=${PYTHON:-.venv/bin/python}
threads=${THREADS:-2}
out=${OUT:-outputs/authors_eval}
runs=${RUNS:-experiments/authors_eval.runs}
"$python" scripts/parallel_runs.py "$runs" "$out" --parallel 1 --threads "$threads"
while read -r name _; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  kept=docs/results/${name}_generator
  [ -f "$kept/metrics.json" ] || "$python" -m dpgen.report --keep "$out/$name" "$kept"
  [ -f "$kept/generator.pt" ] || { echo "error: $kept holds no generator (over the size a kept run may hold)"; exit 1; }
  [ -f "$kept/eval_reference.json" ] || OMP_NUM_THREADS=$threads "$python" -m dpgen.reference_eval "$kept"
done < "$runs"
