#!/usr/bin/env bash
# The main job from a fresh machine: install only what it needs (a compiler, CMake, Highway,
# CLI11, nlohmann-json, fmt), build only the grux command-line tool, train the default
# character-level GRU language model on the embedded Shakespeare corpus for a fixed budget
# (170 s of training; pass --time S or --steps N to change it), then print a generated sample.
# Usage: bash scripts/demo.sh [grux train options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --main
# The test command's build tree (build/), with only the tool's target built: scripts/test.sh
# turns the other options on there and rebuilds only what they add.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGRUX_BUILD_TESTS=OFF -DGRUX_BUILD_BENCH=OFF \
  >build.configure.log 2>&1 ||
  { cat build.configure.log; exit 1; }
cmake --build build -j"$(nproc)" --target grux_cli
out=out/shakespeare
./build/grux train --out "$out" "$@"
echo
echo "== A sample from the trained model (grux generate --checkpoint $out/checkpoint.safetensors):"
./build/grux generate --checkpoint "$out/checkpoint.safetensors" --length 700 --seed 1
