#!/usr/bin/env bash
# A sweep of train.py runs on a lent GPU machine (16 cores, one GPU, the project's missing packages carried as
# wheels in .whl/): every run of $RUNS (default experiments/device_dpmerf_sweep.runs) with trainer=gpu, $PARALLEL at a
# time with $THREADS threads each; first, alone on the machine, the benchmarks named in $BENCH (if any, at most
# 150 s). What comes back in $OUT: summary.json, the sweep's and the benchmark's logs and the runs' small files
# (config, metrics, privacy, sample grids, logs).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ -n "${BENCH:-}" ]; then
  timeout 150 python3 -m benchmarks --quick $BENCH 2>&1 | tee "$OUT/bench.log"
fi
timeout "${SWEEP_SECONDS:-470}" python3 scripts/parallel_runs.py "${RUNS:-experiments/device_dpmerf_sweep.runs}" /tmp/sweep --parallel "${PARALLEL:-5}" --threads "${THREADS:-3}" --extra \
  trainer=gpu logger=csv 2>&1 | tee "$OUT/sweep.log"
cp /tmp/sweep/summary.json "$OUT/"
cd /tmp/sweep && tar czf "$OUT/runs.tar.gz" */.hydra/config.yaml */.hydra/overrides.yaml */metrics.json \
  */privacy.json */samples/*.png *.log 2>/dev/null
ls -la "$OUT"
