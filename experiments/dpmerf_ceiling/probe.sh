#!/usr/bin/env bash
# One noise-free DP-MERF probe on MNIST (privacy.epsilon=10000, the project's control) with the probe evaluation:
# no image-quality callback, downstream CNN for 5 epochs. Usage: probe.sh NAME [hydra overrides...]
# Output: outputs/dpmerf_ceiling/NAME (metrics.json there), log outputs/dpmerf_ceiling/NAME.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
name=$1; shift
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec nice -n 5 .venv/bin/python train.py method=dpmerf data=mnist privacy.epsilon=10000 eval.selection=private_val \
  '~eval.callbacks.image_quality' eval.callbacks.downstream.max_epochs=5 \
  hydra.run.dir=outputs/dpmerf_ceiling/"$name" "$@"
