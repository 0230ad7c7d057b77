#!/usr/bin/env bash
# The GPU issue's device check: `pytest -m gpu`, then the measurements, all written under $OUT
# (summary.json, log.txt, pytest.txt, env.txt). Each part runs under its own time limit and no part
# starts past DEADLINE seconds, so one hang or a slow compile costs only its part. A 15-minute lease
# holds about two calls of 5 minutes on one warm machine: name the parts of each.
#
#   bash benchmarks/gpu/prepare.sh                          # here first: data and wheels into .gpu-data, .whl
#   bash benchmarks/gpu/run.sh tests train_default generate gpt2   # device call 1, carry [".gpu-data", ".whl"]
#   bash benchmarks/gpu/run.sh shakespeare mnist_gen vit char      # device call 2 (mnist_gen's judge is call 1's run)
#   bash benchmarks/gpu/run.sh --dry-run                    # here, every part on the CPU with tiny sizes
# Parts, in the order they run: tests train_default generate gpt2 shakespeare mnist_gen vit char (default: all).
set -uo pipefail
cd "$(dirname "$0")/../.."
DRY=""; [ "${1:-}" = "--dry-run" ] && DRY="--dry-run" && shift
WANT=" ${*:-tests train_default generate gpt2 shakespeare mnist_gen vit char} "
OUT=${OUT:-/tmp/anyformer-gpu-out}; mkdir -p "$OUT"
# Parts and runs live in /tmp, which a warm machine keeps between calls: a second call's summary holds
# the first call's parts too, and mnist_gen finds its judge.
PARTS=/tmp/anyformer-gpu-parts; mkdir -p "$PARTS"; START=$SECONDS; DEADLINE=${DEADLINE:-500}
DATA=$PWD/.gpu-data; [ -d "$DATA" ] || DATA=$(cd ../shared/data 2>/dev/null && pwd)
export ANYFORMER_DATA=$DATA ANYFORMER_SHARED_DATA=$DATA PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export ANYFORMER_CACHE=${ANYFORMER_CACHE:-/tmp/anyformer-gpu-cache} ANYFORMER_GPU_RUNS=/tmp/anyformer-gpu-runs
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1
PY=python3; [ -x .venv/bin/python ] && PY=.venv/bin/python
if [ -d .whl ] && [ -z "$DRY" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
{ date -u; nvidia-smi 2>&1 | head -15; $PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

left() { echo $((DEADLINE - (SECONDS - START))); }
part() {  # part NAME LIMIT CMD...: run CMD under min(LIMIT, time left), its output into log.txt
  local name=$1 limit=$2; shift 2
  [[ "$WANT" == *" $name "* ]] || return 0
  rm -f "$PARTS/$name.json"
  local t=$(left); [ "$t" -lt "$limit" ] && limit=$t
  if [ "$limit" -lt 20 ]; then echo "{\"skipped\": \"out of time\"}" > "$PARTS/$name.json"; echo "== $name: skipped (out of time)"; return; fi
  echo "== $name (limit ${limit}s, $((SECONDS - START))s in)" | tee -a "$OUT/log.txt"
  timeout -k 10 "$limit" "$@" >> "$OUT/log.txt" 2>&1
  local rc=$?
  [ -s "$PARTS/$name.json" ] || echo "{\"failed\": \"exit $rc (124: over its ${limit}s)\"}" > "$PARTS/$name.json"
  echo "== $name: exit $rc" | tee -a "$OUT/log.txt"
}

# The tests first: on the CPU (dry run) the GPU suite's own dry run, the same code with smaller batches.
# The dry run takes two quick ones: the whole suite's dry run is `ANYFORMER_TEST_DEVICE=cpu pytest -m gpu tests/gpu`.
TESTDEV=cuda PICK=(); [ -n "$DRY" ] && TESTDEV=cpu PICK=(-k "greedy or sampling")
part tests 200 env ANYFORMER_TEST_DEVICE=$TESTDEV $PY -m pytest -q -m gpu -rs -p no:cacheprovider "${PICK[@]}" \
  --junitxml="$PARTS/junit.xml" tests/gpu tests/models/test_gpt_decode.py tests/models/test_gpt_sample.py
grep -E "passed|failed|error" "$OUT/log.txt" | tail -1 > "$OUT/pytest.txt"  # empty where tests did not run

M="$PY benchmarks/gpu/measure.py"
part train_default 120 $M train_default --json "$PARTS/train_default.json" $DRY
part generate 90 $M generate --json "$PARTS/generate.json" $DRY
part gpt2 200 $M gpt2 --json "$PARTS/gpt2.json" $DRY
part shakespeare 120 $M shakespeare --json "$PARTS/shakespeare.json" $DRY
part mnist_gen 120 $M mnist_gen --json "$PARTS/mnist_gen.json" $DRY
part vit 150 $M vit --json "$PARTS/vit.json" $DRY
part char 120 $M char --json "$PARTS/char.json" $DRY

$PY benchmarks/gpu/summarize.py "$PARTS" "$OUT/env.txt" > "$OUT/summary.json"
echo "== done in $((SECONDS - START))s"; cat "$OUT/summary.json"
