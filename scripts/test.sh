#!/usr/bin/env bash
# Every test from a fresh machine: install what is missing, build (Release), run the whole
# suite with CTest and the main job (about 3 minutes of training); then build with
# AddressSanitizer + UndefinedBehaviorSanitizer and run the whole suite again. Exits non-zero
# if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

echo "== Release build and tests"
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DGRUX_BUILD_TESTS=ON -DGRUX_BUILD_BENCH=ON
ctest --test-dir build --no-tests=error --output-on-failure -j"$(nproc)"
./build/grux demo --reps 3
echo "== The main job (as scripts/demo.sh): train the default language model, then generate"
./build/grux train --out out/test-main-job
./build/grux generate --checkpoint out/test-main-job/checkpoint.safetensors --length 300

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRUX_SANITIZE=ON -DGRUX_BUILD_TESTS=ON
# OpenMP's runtime keeps thread pools alive at exit; leak reports there are not ours.
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --no-tests=error --output-on-failure -j"$(nproc)"
