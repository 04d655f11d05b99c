#!/usr/bin/env bash
# The G-PATE authors' evaluation of kept generators on a lent GPU machine (16 cores, one GPU; the project's missing
# packages carried as wheels in .whl/, as experiments/device_dpmerf_sweep.sh). $RUNS: the kept runs to evaluate
# (docs/results/<name>, each with its generator.pt), trained together as one vectorized model. Comes back in $OUT:
# each run's eval_reference.json as <name>.eval_reference.json, the log, and the state file if the time ran out
# (copy it to outputs/reference_eval/ here and the evaluation continues on the CPU or on the next machine).
# The working tree a machine receives is at most 64 MiB: before the call, delete from the checkout what this call
# does not need (docs/results/*/samples/*.png and the generator.pt files not in $RUNS; all of them are committed),
# and after it bring them back with `git checkout -- docs/results` (docs/LOG.md, "The authors' evaluation").
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
state=$OUT/reference_eval_state.pt
timeout "${EVAL_SECONDS:-500}" python3 -m dpgen.reference_eval $RUNS --device cuda --state "$state" 2>&1 | tee "$OUT/reference_eval.log"
for run in $RUNS; do
  [ -f "$run/eval_reference.json" ] && cp "$run/eval_reference.json" "$OUT/$(basename "$run").eval_reference.json"
done
ls -la "$OUT"
