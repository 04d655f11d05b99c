#!/usr/bin/env bash
# Trains the cells of $RUNS (a runs file: `name override ...`; experiments/authors_eval.runs' format, a ptg: prefix
# dropped) on a lent GPU machine and sends each back kept with its generator, ready for the authors' evaluation
# (experiments/device_reference_eval.sh) or eval=ptg: $OUT/<name>_generator.tar.gz holds what
# `python -m dpgen.report --keep` keeps (the generator in half precision: G-PATE's 14 MB, under the 16 MiB a file
# that comes back may hold; at most 8 files come back, train.log one of them: 7 cells a call). Here, untar each into
# docs/results/. $PARALLEL runs at a
# time (default 3) with $THREADS threads (default 4), $EXTRA overrides for every run (default: trainer=gpu
# logger=csv; G-PATE's cells also take their teachers 500 at a time), at most $TRAIN_SECONDS (default 480). The project's missing packages come as
# wheels in .whl/ where the machine lacks them (experiments/device_dpmerf_sweep.sh).
set -uo pipefail
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
fi
python=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
out=${WORK:-/tmp/train_keep}
mkdir -p "$out/kept"
sed -e 's/^ptg://' -e '/experiment=gpate\//s/$/ method.module.teachers.chunk_size=500/' "$RUNS" > "$out/cells.runs"
timeout "${TRAIN_SECONDS:-480}" "$python" scripts/parallel_runs.py "$out/cells.runs" "$out/runs" \
  --parallel "${PARALLEL:-3}" --threads "${THREADS:-4}" \
  --extra ${EXTRA-trainer=gpu logger=csv} 2>&1 | tee "$OUT/train.log"
for run in "$out"/runs/*/; do
  name=$(basename "$run")
  [ -f "$run/metrics.json" ] || { echo "not finished: $name"; continue; }
  "$python" -m dpgen.report --keep "$run" "$out/kept/${name}_generator" 2>&1 | tee -a "$OUT/train.log"
  tar czf "$OUT/${name}_generator.tar.gz" -C "$out/kept" "${name}_generator"
done
ls -la "$OUT"
