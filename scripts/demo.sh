#!/usr/bin/env bash
# The main job from a fresh machine: install what is missing, build, train the default
# character-level GRU language model on the embedded Shakespeare corpus for a fixed budget
# (170 s of training; pass --time S or --steps N to change it), then print a generated sample.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DGRUX_BUILD_TESTS=OFF -DGRUX_BUILD_BENCH=OFF
out=out/shakespeare
./build/grux train --out "$out" "$@"
echo
echo "== A sample from the trained model (grux generate --checkpoint $out/checkpoint.safetensors):"
./build/grux generate --checkpoint "$out/checkpoint.safetensors" --length 700 --seed 1
