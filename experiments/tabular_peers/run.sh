#!/usr/bin/env bash
# MST and AIM beside dpgen's methods on the real tables, on the same fixed split, scored by the same classifiers.
# Builds its own virtual environment (smartnoise-synth is no dependency of dpgen: it pins an old Opacus and brings
# JAX), then for each cell writes a synthetic CSV in the table's own layout (peers.py) and scores it with the
# project's evaluate.py (G-PATE appendix E's 4 classifiers; PEER_MODELS=pategan for PATE-GAN's 12). From the
# repository root, after `python -m dpgen.data.rtables`:
#   bash experiments/tabular_peers/run.sh [outputs/tabular_peers]
# PEERS_VENV (default .cache/peers-venv), CELLS (default "mst:hi:1 aim:hi:1 ..."), PYTHON (dpgen's interpreter).
# AIM_MAX_MODEL_SIZE (MB; unset: AIM's default 80): a smaller cap, recorded in peer.json, for a shorter run.
# AIM_ITERS (unset: smartnoise's 1,000 a round, from scratch): fewer mirror-descent iterations a round, each round
# warm-started from the last model as private-pgm's AIM does; recorded in peer.json (give it its own output folder).
# AIM_ORACLE (unset: smartnoise's message_passing_stable; fast: mbi's default, as private-pgm's own AIM, the same
# marginals up to float rounding and about 5 times as fast on a large model): a run may change it when it resumes.
# AIM saves its state after every round (carry/tabular_peers/<cell>[_iters<n>][_mms<mb>].aim_state.pkl, peers.py
# resumable_aim; AIM_STATE_DIR sets the folder): a cell started again after an interruption continues from its last
# round, on another machine too once the state is committed (carry/README.md). A finished state stays until the
# cell's result is kept in docs/results (then remove it): until then a lost outputs/ folder costs only the final
# estimate and sample. peer.json records its rounds, resumptions and total time.
# check_aim_resume.py (in the peers' environment) checks a cut and resumed run against an uninterrupted one.
set -euo pipefail
out=${1:-outputs/tabular_peers}
venv=${PEERS_VENV:-.cache/peers-venv}
python=${PYTHON:-python}
models=${PEER_MODELS:-gpate}
cells=${CELLS:-"mst:hi:1 aim:hi:1 mst:doctor_contacts:1 aim:doctor_contacts:1 mst:hi:10 aim:hi:10 mst:doctor_contacts:10 aim:doctor_contacts:10"}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install "smartnoise-synth==1.0.8"   # 1.0.8: MST and AIM on private-pgm (mbi 1.1, JAX)
fi
mkdir -p "$out"
for cell in $cells; do
  IFS=: read -r mechanism table eps <<< "$cell"
  name=${mechanism}_${table}_eps${eps}
  if [ ! -f "$out/$name/synthetic.csv" ]; then
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$venv/bin/python" experiments/tabular_peers/peers.py --table "$table" \
      --mechanism "$mechanism" --epsilon "$eps" --out "$out/$name" \
      --state "${AIM_STATE_DIR:-carry/tabular_peers}/$name${AIM_ITERS:+_iters$AIM_ITERS}${AIM_MAX_MODEL_SIZE:+_mms$AIM_MAX_MODEL_SIZE}.aim_state.pkl" \
      ${AIM_MAX_MODEL_SIZE:+--max-model-size "$AIM_MAX_MODEL_SIZE"} ${AIM_ITERS:+--aim-iters "$AIM_ITERS" --aim-warm-start} ${AIM_ORACLE:+--aim-oracle "$AIM_ORACLE"}
  fi
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$python" evaluate.py synthetic="$out/$name/synthetic.csv" data="$table" \
    '~eval.callbacks.image_quality' eval.callbacks.downstream.tabular_models="$models" \
    out="$out/$name/synthetic.$models.eval.json"
done
