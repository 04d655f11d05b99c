#!/usr/bin/env bash
# The seed's table under its authors' evaluation (docs/EVALUATION.md, eval=reference), one cell of
# experiments/authors_eval.runs after another: trained again from its experiment file (scripts/parallel_runs.py:
# resumes a run cut off on the same machine), kept with its generator as docs/results/<name>_generator, then scored by
# `python -m dpgen.reference_eval` (a cell named ptg:<name>: by PATE-TripleGAN's evaluation, `evaluate.py eval=ptg`,
# into <kept>/eval_ptg.json). The authors' evaluation (hours on a CPU) keeps its state in carry/reference_eval/, which is
# committed (carry/README.md), so that it continues on the next machine; a training is too large to carry and must
# end where it started. Each step skips what is done, so after an interruption the same command continues. From the
# repository root:
#   bash experiments/authors_eval.sh
# On a CPU the evaluation is most efficient at one thread a process (docs/results/benchmarks/): give two processes
# their own RUNS files and THREADS=1 to use two cores.
# PYTHON (default .venv/bin/python), THREADS (default 2), OUT (default outputs/authors_eval), RUNS (default
# experiments/authors_eval.runs), SCORE (default 1; 0: train and keep every cell, score none: for a machine without
# a GPU, whose evaluation of one cell takes hours, while a lent GPU scores several in minutes), PATIENCE (default
# none; N: stop a cell's evaluation once it has gone N epochs without a gain, a lower bound of the authors' number,
# marked so in the table; the same command without PATIENCE continues it to the 600th epoch). The comparison's cells (docs/results/comparison.yaml) are switched to the new kept
# runs by hand, after a look at them.
set -euo pipefail
python=${PYTHON:-.venv/bin/python}
threads=${THREADS:-2}
out=${OUT:-outputs/authors_eval}
runs=${RUNS:-experiments/authors_eval.runs}
while read -r cell overrides; do
  [[ -z "$cell" || "$cell" == \#* ]] && continue
  name=${cell#ptg:}  # ptg:<name>: a cell the PATE-TripleGAN paper reports, scored by its evaluation (eval=ptg)
  kept=docs/results/${name}_generator
  if [ ! -f "$kept/metrics.json" ]; then
    "$python" scripts/parallel_runs.py <(echo "$name $overrides") "$out" --parallel 1 --threads "$threads" < /dev/null
    [ -f "$out/$name/metrics.json" ] || { echo "error: $name did not finish: see $out/$name.log"; exit 1; }
    "$python" -m dpgen.report --keep "$out/$name" "$kept" < /dev/null
  fi
  [ -f "$kept/generator.pt" ] || { echo "error: $kept holds no generator (over the size a kept run may hold)"; exit 1; }
  [ "${SCORE:-1}" = 0 ] && continue
  if [ "$name" != "$cell" ]; then  # 20,000 samples, five trainings of 10 epochs: a 23rd of the authors' work
    [ -f "$kept/eval_ptg.json" ] && continue
    data=$("$python" -c "from omegaconf import OmegaConf; print(OmegaConf.load('$kept/config.yaml').data.name)")
    OMP_NUM_THREADS=$threads "$python" generate.py run="$kept" n=20000 out="$out/$name/ptg_samples" < /dev/null
    OMP_NUM_THREADS=$threads "$python" evaluate.py synthetic="$out/$name/ptg_samples/synthetic.npz" data="$data" \
      eval=ptg '~eval.callbacks.image_quality' out="$out/$name/eval_ptg.json" < /dev/null  # its states stay there
    cp "$out/$name/eval_ptg.json" "$kept/eval_ptg.json"
  elif [ ! -f "$kept/eval_reference.json" ] || { [ -z "${PATIENCE:-}" ] && grep -q '"stopped_early"' "$kept/eval_reference.json"; }; then
    # hours on a CPU; a number stopped early by PATIENCE is continued to the last epoch by a call without it
    OMP_NUM_THREADS=$threads "$python" -m dpgen.reference_eval "$kept" \
      --state "carry/reference_eval/${name}_generator.pt" ${PATIENCE:+--patience "$PATIENCE"} < /dev/null
  fi
done < "$runs"
