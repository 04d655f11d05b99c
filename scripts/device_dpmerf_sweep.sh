#!/usr/bin/env bash
# The DP-MERF option sweep on a lent GPU machine (16 cores, one GPU, the project's missing packages carried as
# wheels in .whl/): every run of scripts/device_dpmerf_sweep.runs with trainer=gpu, 5 at a time; what comes back
# in $OUT: summary.json, the sweep's log and the runs' small files (config, metrics, privacy, final grid).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout "${SWEEP_SECONDS:-470}" python3 scripts/parallel_runs.py "${RUNS:-scripts/device_dpmerf_sweep.runs}" /tmp/sweep --parallel "${PARALLEL:-5}" --threads 3 --extra \
  trainer=gpu logger=csv 2>&1 | tee "$OUT/sweep.log"
cp /tmp/sweep/summary.json "$OUT/"
cd /tmp/sweep && tar czf "$OUT/runs.tar.gz" */.hydra/config.yaml */.hydra/overrides.yaml */metrics.json \
  */privacy.json */samples/final.png *.log 2>/dev/null
ls -la "$OUT"
