#!/usr/bin/env bash
# The G-PATE authors' evaluation of kept generators on a lent GPU machine (16 cores, one GPU; the project's missing
# packages carried as wheels in .whl/, as experiments/device_dpmerf_sweep.sh). $RUNS: the kept runs to evaluate
# (docs/results/<name>, each with its generator.pt), trained together as one vectorized model. Comes back in $OUT:
# each run's eval_reference.json as <name>.eval_reference.json, the log, and the state file if the time ran out.
# To continue on the next lent machine, put that file back at outputs/reference_eval/device_state.pt and name
# outputs/reference_eval in the call's carry, or commit it in carry/ (carry/README.md). It continues on a GPU only
# (the vectorized model is in its key); its key names the generator files and settings, not the samples' bits, which
# may differ on another machine. A CPU evaluation's state in carry/reference_eval/ is then left over: remove it.
# The working tree a machine receives is at most 64 MiB: before the call, delete from the checkout what this call
# does not need (docs/results/*/samples/*.png and the generator.pt files not in $RUNS; all of them are committed),
# and after it bring them back with `git checkout -- docs/results` (docs/LOG.md, "The authors' evaluation").
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
state=outputs/reference_eval/device_state.pt
mkdir -p outputs/reference_eval
timeout "${EVAL_SECONDS:-500}" python3 -m dpgen.reference_eval $RUNS --device cuda --state "$state" 2>&1 | tee "$OUT/reference_eval.log"
[ -f "$state" ] && cp "$state" "$OUT/device_state.pt"
for run in $RUNS; do
  [ -f "$run/eval_reference.json" ] && cp "$run/eval_reference.json" "$OUT/$(basename "$run").eval_reference.json"
done
ls -la "$OUT"
