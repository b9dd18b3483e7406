#!/usr/bin/env bash
# The tests of grux's thread code under ThreadSanitizer, in a build made with
#   cmake -S . -B DIR -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
#     -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRUX_SANITIZE=thread -DGRUX_BUILD_TESTS=ON -DGRUX_WITH_MPI=OFF
#   cmake --build DIR --target grux_tests_core grux_tests_kernels grux_tests_gru grux_tests_realtime
# Usage: bash scripts/test_tsan.sh DIR. Exits non-zero on any report or failure.
#
# What runs: the thread team; the C API from several threads on several streams of one model;
# streams with worker threads and the cells' shared steps (GRU and LSTM); the parallel GEMM,
# scans and minGRU; a shortened soak run. OpenMP's regions run under
# LLVM's Archer (OMP_TOOL_LIBRARIES), which tells ThreadSanitizer what OpenMP's constructs
# order; tests/tsan_suppressions.txt says what is suppressed and why.
# Left out, with the reason:
# - the tests that fork and then start threads in the child (ThreadSanitizer refuses threads
#   after a multi-threaded process forks): ThreadTeam's AChildProcessAfterFork...,
#   ATeamMadeBeforeFork..., ThreadsThatCannotStart... and StreamApi's ...MadeBeforeFork...;
# - the real-time tests that count allocations, locks and system calls (they stand down under
#   the sanitizers, which own malloc);
# - the CLI, convolution, training and cost programs: they run the same kernels through the
#   same drivers as the programs above, one operator at a time.
set -euo pipefail
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | tail -n 1)
[ -n "$archer" ] || { echo "test_tsan: LLVM's Archer (libarcher.so, package libomp-dev) is missing" >&2; exit 1; }
run=(
  'ThreadTeam\.|CApi\.'                                                # tests_core
  'GemmPacked\.Parallel|Gemm\.SameBitsOnAnyThreadCount|Scan(Kernels|Callable)\.|MinGru\.AnyThreadCount'  # tests_kernels
  'Stream|GruCell|Thread|Lstm.*(Cell|Layer)'                          # tests_gru
  '^Soak\.'                                                             # tests_realtime
)
forks='ThreadTeam\.(AChildProcessAfterFork|ATeamMadeBeforeFork|ThreadsThatCannotStart)|StreamApi\.StreamsAndCellsMadeBeforeFork'
regex=$(IFS='|'; echo "${run[*]}")
# halt_on_error: the first report fails its test; second_deadlock_stack: both stacks of a
# lock-order report. The soak run at a tenth of the test command's frames (about 10x
# slower under the sanitizer).
OMP_TOOL_LIBRARIES=$archer ARCHER_OPTIONS=verbose=0 \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$here/../tests/tsan_suppressions.txt" \
  GRUX_SOAK_FRAMES=200000 \
  ctest --test-dir "$dir" --no-tests=error --output-on-failure -j"$(nproc)" -R "$regex" -E "$forks"
