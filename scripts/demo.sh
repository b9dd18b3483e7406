#!/usr/bin/env bash
# The main job from a fresh machine: install what is missing, build, run `grux demo` (the
# example GRU on its example input, checked against PyTorch's output, with timings).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DGRUX_BUILD_TESTS=OFF -DGRUX_BUILD_BENCH=OFF
./build/grux demo "$@"
