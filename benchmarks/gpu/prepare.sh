#!/usr/bin/env bash
# Run HERE, before a device call: copies what benchmarks/gpu/run.sh needs into folders that git ignores
# and the device tool carries (`carry: [".gpu-data", ".whl"]`), since ../shared does not travel:
#   .gpu-data/  MNIST, Fashion-MNIST, Tiny Shakespeare, GPT-2's BPE files, GunPoint (the series recipe's
#               default, copied from aeon's package: the GPU image has no aeon), and a CIFAR-10 tar cut to
#               100 training and 20 test images per class (the whole tar, 89 MB, is over the 64 MiB limit),
#               named cifar10_jpg_cut.tar: under the official name the loader checks the whole tar's
#               checksum and rightly refuses the cut one
#   .whl/       the serve extra's wheels, which the GPU image lacks (starlette, python-multipart, uvicorn:
#               the 2026-11-28 H200 run's serve test failed on the missing uvicorn; h11 and click are there)
set -euo pipefail
cd "$(dirname "$0")/../.."
SHARED=${ANYFORMER_SHARED_DATA:-../shared/data}
mkdir -p .gpu-data .whl
for d in mnist fashion-mnist tinyshakespeare gpt2; do
  [ -d ".gpu-data/$d" ] || cp -r "$SHARED/$d" .gpu-data/
done
if [ ! -d .gpu-data/GunPoint ]; then
  AEON=$(.venv/bin/python -c "from anyformer.data.series.dataset import aeon_data_dir; print(aeon_data_dir() or '')")
  [ -n "$AEON" ] || { echo "prepare.sh: aeon is not installed here (bash scripts/setup.sh test installs it)" >&2; exit 1; }
  cp -r "$AEON/GunPoint" .gpu-data/
fi
rm -f .gpu-data/cifar10/cifar10_jpg.tar  # an earlier preparation's cut tar under the official name
if [ ! -f .gpu-data/cifar10/cifar10_jpg_cut.tar ]; then
  tmp=$(mktemp -d)
  tar -xf "$SHARED/cifar10/cifar10_jpg.tar" -C "$tmp"
  for split_n in train:100 test:20; do
    split=${split_n%:*} n=${split_n#*:}
    for cls in "$tmp"/cifar10_jpg/"$split"/*/; do
      ls "$cls" | sort | tail -n +$((n + 1)) | sed "s|^|$cls|" | xargs rm -f
    done
  done
  mkdir -p .gpu-data/cifar10
  tar -cf .gpu-data/cifar10/cifar10_jpg_cut.tar -C "$tmp" cifar10_jpg
  rm -rf "$tmp"
fi
# Wheels for the device's Python 3.12; pure Python, so one file each.
[ -n "$(ls .whl/uvicorn-*.whl 2>/dev/null)" ] || python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 -d .whl starlette==1.10.0 python-multipart==0.0.34 uvicorn==0.54.0
du -sh .gpu-data .whl
