#!/usr/bin/env bash
# grux on 64-bit Arm (aarch64) from a machine of another architecture: cross-compiled with
# Debian's cross compiler and arm64 libraries (cmake/toolchain-aarch64.cmake; installed by
# scripts/install-deps.sh) and run under qemu-user, as a Cortex-A72 (a Raspberry Pi 4's core:
# NEON, nothing newer than Armv8.0).
# Usage: bash scripts/test_arm64.sh DIR [build|test]   (both when neither is named)
#   build: configure DIR (Release, no MPI, no Python) and build the test programs below;
#   test:  run their tests under qemu-aarch64 (the CLI that tests start too: the build's
#          CMAKE_CROSSCOMPILING_EMULATOR prefixes its command).
#
# What runs, on NEON (an aarch64 build's only SIMD target: CMakeLists.txt says why SVE's are
# left out), with 1 and 2 threads where the tests take both:
# - tests_kernels: the packed GEMMs (f32, f64, bf16, int8), scans, minGRU, measuring probes;
# - tests_gru: the PyTorch golden files of nn.GRU and nn.LSTM (outputs and gradients), finite
#   differences, streams and cells, bit-invariance across threads and batches, precisions;
# - tests_realtime: no allocation, lock or system call on a stream's audio path; the soak run;
# - tests_core: tensors, files, the C API, and the model files (RTNeural, GuitarML, NAM, ONNX)
#   against the golden outputs of their own engines;
# - tests_conv: the convolutions against PyTorch's (the CLI's too).
# Left out:
# - the training, optimizer and cost-model tests (tests_nn) and the CLI's (tests_cli): the same
#   kernels through the same drivers, with about 4 more minutes under emulation;
# - tests that qemu-user cannot run as a CPU would (each checked on this machine's own build):
#   a child process forked from a process with threads, which then starts threads
#   (ThreadTeam.AChildProcessAfterFork..., ATeamMadeBeforeFork..., StreamApi.StreamsAndCells
#   MadeBeforeFork...): qemu 7.2 aborts on an assertion of its own; and the tests that cap the
#   address space with RLIMIT_AS (ThreadTeam.ThreadsThatCannotStart..., CApi.MemoryTheSystem
#   Refuses...): qemu-user accepts the limit without applying it (it would cap qemu itself);
# - the C programs run by CTest outside GoogleTest (capi.c99, capi.export_c) and the HTML
#   report in Chromium: they run on this machine's own build.
# Speed on arm64 is not measured here: qemu translates every instruction, so no time under it
# says anything about an Arm core.
set -euo pipefail
dir=$1
step=${2:-all}
root=$(cd "$(dirname "$0")/.." && pwd)
programs=(grux_tests_kernels grux_tests_gru grux_tests_realtime grux_tests_core grux_tests_conv)

if [ "$step" = all ] || [ "$step" = build ]; then
  cmake -S "$root" -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchain-aarch64.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DGRUX_BUILD_TESTS=ON -DGRUX_BUILD_BENCH=OFF \
    -DGRUX_BUILD_EXAMPLES=OFF -DGRUX_INSTALL=OFF -DGRUX_WITH_MPI=OFF >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; exit 1; }
  cmake --build "$dir" -j"$(nproc)" --target "${programs[@]}"
fi

if [ "$step" = all ] || [ "$step" = test ]; then
  export QEMU_CPU=cortex-a72
  unset GRUX_SIMD_TARGET
  # The SIMD target the build runs (one line per target it can run).
  targets=$(qemu-aarch64 "$dir/grux" info --simd-targets | paste -sd ' ')
  echo "aarch64 under qemu ($QEMU_CPU): SIMD targets $targets"
  [ "$targets" = NEON ] || { echo "test_arm64: expected the NEON target only, got: $targets" >&2; exit 1; }
  # Each program runs whole, in one process: qemu starts once a program instead of once a test
  # (CTest's way: 5.3 minutes on 2 cores instead of under 2). The soak run at a tenth of the
  # frames of the test command's (about 10x slower under emulation).
  export GRUX_SOAK_FRAMES=200000
  skip='ThreadTeam.AChildProcessAfterFork*:ThreadTeam.ATeamMadeBeforeFork*'
  skip+=':ThreadTeam.ThreadsThatCannotStart*:StreamApi.StreamsAndCellsMadeBeforeFork*'
  skip+=':CApi.MemoryTheSystemRefuses*'
  program() {
    local log=$dir/tests_$1.log
    if qemu-aarch64 "$dir/tests/tests_$1" --gtest_brief=1 --gtest_filter="-$skip" >"$log" 2>&1; then
      echo "tests_$1: $(grep -h '^\[  PASSED  \]' "$log")"
    else
      tail -n 60 "$log"
      echo "test_arm64: tests_$1 failed under qemu (its whole output: $log)" >&2
      return 1
    fi
  }
  # Two at a time: the longest (tests_kernels, about 80 s) beside the four others in turn.
  program kernels & first=$!
  (status=0; for p in gru realtime core conv; do program "$p" || status=1; done; exit $status) &
  rest=$!
  status=0
  wait "$first" || status=1
  wait "$rest" || status=1
  exit $status
fi
