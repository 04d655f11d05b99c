#!/usr/bin/env bash
# The real-data rows of the tabular comparison: the same downstream classifiers as every synthetic row, trained on the
# real training split (<root>/rtables/<table>_train.csv, python -m dpgen.data.rtables) and tested on the real test
# split, through evaluate.py, which reads a CSV in the table's own layout as it reads generate.py's synthetic tables.
# G-PATE appendix E's 4 models and PATE-GAN's 12. Run from the repository root:
#   bash experiments/tabular_real_rows.sh [outputs/tabular_real]
set -euo pipefail
out=${1:-outputs/tabular_real}
root=${DPGEN_DATA:-$HOME/.cache/dpgen}
mkdir -p "$out"
for table in hi doctor_contacts; do
  for models in gpate pategan; do
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} python evaluate.py synthetic="$root/rtables/${table}_train.csv" data=$table \
      '~eval.callbacks.image_quality' eval.callbacks.downstream.tabular_models=$models \
      out="$out/real_${table}_${models}.json"
  done
done
