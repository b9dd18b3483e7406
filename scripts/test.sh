#!/usr/bin/env bash
# Every test from a fresh machine: install what is missing, build (Release), run the whole
# suite with CTest, the Python package (scripts/test_python.sh: wheel, pip install ., pytest),
# check grux as an installed package (scripts/test_package.sh), run the
# suite again on every other SIMD target this CPU can run, then the main job
# (about 3 minutes of training); then run the whole suite again in a build with
# AddressSanitizer + UndefinedBehaviorSanitizer, every fuzzer of tests/fuzz in that build, and
# the thread code's tests under ThreadSanitizer (scripts/test_tsan.sh), and the tests of an
# aarch64 build under qemu-user (scripts/test_arm64.sh); the three builds made in the background
# from the start, at the lowest priority. Exits non-zero if anything fails.
#
# No grux result depends on the environment (docs/determinism.md); the runs below
# check that under three OpenBLAS settings: unset (what users have), the generic Prescott kernel
# (what OpenBLAS 0.3.21 falls back to on a CPU it does not recognise) and the machine's own
# core type.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

# Each part's heading with the time since the start (where CI's time goes).
start=$SECONDS
part() {
  local s=$(( SECONDS - start ))
  echo "== $* ($(( s / 60 )) min $(( s % 60 )) s in)"
}
# Release tests as many at once as half the cores: most run two threads (the thread-count
# variants), and one test per core takes longer than one per two cores, with twice the CPU
# time: each test's threads wait spinning for cores the other holds. The sanitized tests
# compute far more per wait and run one per core, which is faster for them.
release_jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
ctest_all() { ctest --no-tests=error --output-on-failure -j"$release_jobs" "$@"; }

part "Format: every C and C++ source as .clang-format says (clang-format --dry-run)"
bash scripts/check_format.sh

# The sanitized builds (their parts below) start now, one after the other in the background at
# the lowest CPU priority: they take what the Release build and the parts before their own
# leave idle (about half the cores through most tests), and their parts wait for the rest.
# - build-asan: AddressSanitizer + UndefinedBehaviorSanitizer, with the fuzzers
#   (GRUX_BUILD_FUZZERS: libFuzzer is clang's, so clang builds it). The library at -O1 with line
#   tables, the tests' own code at -O0 (GRUX_SANITIZE in CMakeLists.txt, tests/CMakeLists.txt),
#   only this CPU's best SIMD target.
# - build-tsan: ThreadSanitizer (clang), the test programs of the thread code only
#   (scripts/test_tsan.sh says which and why).
# Both without MPI: they compile and refuse to run as many ranks (the MPI runs are tested in the
# Release build; Open MPI's own allocations and threads are not ours to check).
# Their own process group (set -m), so that a failure before their parts stops them whole; not
# their own session (setsid), whose scheduling group would share the CPU equally with ours
# whatever its niceness (Linux's autogroups).
asan_log=build-asan.build.log
tsan_log=build-tsan.build.log
clang_args=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DGRUX_BUILD_TESTS=ON -DGRUX_WITH_MPI=OFF)
set -m
nice -n 19 bash -c '
  bash scripts/build.sh build-asan "$@" -DGRUX_SANITIZE=ON -DGRUX_BUILD_FUZZERS=ON >'"$asan_log"' 2>&1 ||
    { echo "the sanitized build (build-asan) failed: its output is in '"$asan_log"'" >'"$tsan_log"'; exit 1; }
  { cmake -S . -B build-tsan "$@" -DGRUX_SANITIZE=thread &&
    cmake --build build-tsan -j"$(nproc)" --target grux_tests_core grux_tests_kernels \
      grux_tests_gru grux_tests_realtime; } >'"$tsan_log"' 2>&1' sanitized "${clang_args[@]}" &
sanitized_pid=$!
# - build-arm64: grux cross-compiled for aarch64 (scripts/test_arm64.sh; its tests run under
#   qemu at the end), after the sanitized builds, at the same priority. Not on an Arm machine,
#   whose Release build above is the arm64 one.
arm64_log=build-arm64.build.log
background=("$sanitized_pid")
arm64_pid=
if [ "$(uname -m)" != aarch64 ]; then
  nice -n 19 bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 5; done
    bash scripts/test_arm64.sh build-arm64 build' arm64 "$sanitized_pid" >"$arm64_log" 2>&1 &
  arm64_pid=$!
  background+=("$arm64_pid")
fi
set +m
# Signals to every background group. (CONT after TERM: a group may be stopped, during the main
# job.)
signal_background() {
  local pid
  for pid in "${background[@]}"; do kill "$@" -- -"$pid" 2>/dev/null || true; done
}
trap 'signal_background -TERM; signal_background -CONT' EXIT
trap 'exit 130' INT  # (a shell killed by a signal would skip its EXIT trap)
trap 'exit 143' TERM

part "Release build and tests (OPENBLAS_CORETYPE unset)"
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DGRUX_BUILD_TESTS=ON -DGRUX_BUILD_BENCH=ON \
  -DGRUX_BUILD_PYTHON=ON -DPython_EXECUTABLE=/usr/bin/python3
(unset OPENBLAS_CORETYPE GRUX_SIMD_TARGET; ctest_all --test-dir build)
./build/grux info

part "Python package: wheel and pip install . into virtual environments, pytest"
bash scripts/test_python.sh build

part "Packaging: install, find_package, pkg-config, dlopen'ed plugin, Debian packages"
bash scripts/test_package.sh build

part "Documentation: every command in README.md and docs/ (scripts/test_docs.py)"
python3 scripts/test_docs.py build

# The kernels again on each other SIMD target (GRUX_SIMD_TARGET; the best one ran above),
# with OpenBLAS on its generic kernel. The HTML report, the cost CLI's formats, the slow
# Toeplitz gradient checks and the MPI runs (no SIMD of their own) run once above, and so do
# the CLI's benchmark runs (CliBench: 10 timed runs, each measuring the GEMM peak, most of a
# minute a target; LstmCliBench and ScanCli's, 15 s a target; the kernels they run are checked
# on every target by the kernel tests).
for target in $(./build/grux info --simd-targets | tail -n +2); do
  part "Release tests on SIMD target $target (OPENBLAS_CORETYPE=Prescott)"
  GRUX_SIMD_TARGET=$target OPENBLAS_CORETYPE=Prescott \
    ctest_all --test-dir build -E 'report_chromium|^Cost|^CliBench|^LstmCliBench|^ScanCli\.Bench|toeplitz|^dist\.'
done

part "The main job (as scripts/demo.sh): train the default language model, then generate"
# Alone: the background build stops meanwhile. The training's time budget plans its steps
# from the speed of the first ones, which a build running beside them would slow (the plan
# would then hold far fewer steps than the budget allows).
signal_background -STOP
./build/grux demo --reps 3
./build/grux train --out out/test-main-job
./build/grux generate --checkpoint out/test-main-job/checkpoint.safetensors --length 300
signal_background -CONT

part "AddressSanitizer + UndefinedBehaviorSanitizer build (started at the beginning) and tests"
if ! wait "$sanitized_pid"; then
  cat "$asan_log" "$tsan_log"
  echo "a sanitized build (build-asan, build-tsan) failed: its output is above" >&2
  exit 1
fi
tail -n 2 "$asan_log"
# The sanitized build compiles only this machine's best Highway target (CMakeLists.txt): it
# must be the one the Release build runs, or the sanitizers would check another code path.
best=$(env -u GRUX_SIMD_TARGET ./build/grux info --simd-targets | head -n 1)
asan_best=$(env -u GRUX_SIMD_TARGET ASAN_OPTIONS=detect_leaks=0 ./build-asan/grux info --simd-targets | head -n 1)
if [ "$asan_best" != "$best" ]; then
  echo "the sanitized build runs SIMD target $asan_best, the Release build $best" >&2
  exit 1
fi
# OpenBLAS told the machine's own core type (what a user who sets it has).
core=""
if grep -qw avx512f /proc/cpuinfo; then core=SkylakeX; elif grep -qw avx2 /proc/cpuinfo; then core=Haswell; fi
echo "(OPENBLAS_CORETYPE=${core:-unset})"
# OpenMP's runtime keeps thread pools alive at exit; leak reports there are not ours.
env -u GRUX_SIMD_TARGET ${core:+OPENBLAS_CORETYPE=$core} \
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --no-tests=error --output-on-failure -j"$(nproc)"

part "Fuzzers: every reader and parser under libFuzzer in the sanitized build, 15 s each"
# Two at a time (one a core), each from its seed corpus (tests/fuzz/corpus) and, for the model
# readers, the model files of tests/reference; new inputs into a scratch folder. A crash, a
# leak, a timeout (10 s for one input) or 2 GB of memory fails the part and leaves the input in
# build-asan/fuzz/.
fuzz() {
  local target=$1 root=$PWD work=$PWD/build-asan/fuzz/$1 extra
  case $target in
    npy) extra="$root/tests/reference/models/golden" ;;
    rtneural_json | guitarml_json | nam | safetensors | onnx | model_load)
      extra="$root/tests/reference/models/files $root/tests/reference/onnx/files" ;;
    *) extra="" ;;
  esac
  mkdir -p "$work"
  (cd "$work" && "$root/build-asan/tests/fuzz/fuzz_$target" -max_total_time=15 -max_len=65536 \
     -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "$work" "$root/tests/fuzz/corpus/$target" \
     $extra >"$work.log" 2>&1) ||
    { tail -n 40 "$work.log"; echo "fuzzer $target failed" >&2; return 1; }
  grep -h "stat::number_of_executed_units" "$work.log" | sed "s/^/$target: /"
}
fuzz_failed=0
set -- rtneural_json guitarml_json nam safetensors onnx model_load npy safetensors_file \
  checkpoint descriptor rearrange profile sweep
while [ $# -gt 0 ]; do
  fuzz "$1" & f1=$!
  f2=
  [ -z "${2:-}" ] || { fuzz "$2" & f2=$!; }
  wait $f1 || fuzz_failed=1
  [ -z "$f2" ] || wait $f2 || fuzz_failed=1
  shift; [ $# -eq 0 ] || shift
done
[ "$fuzz_failed" = 0 ]

part "ThreadSanitizer build (started at the beginning) and the thread code's tests"
tail -n 2 "$tsan_log"
bash scripts/test_tsan.sh build-tsan

if [ -n "$arm64_pid" ]; then
  part "aarch64: the cross build (made in the background) and its tests under qemu-user"
  if ! wait "$arm64_pid"; then
    cat "$arm64_log"
    echo "the aarch64 build (build-arm64) failed: its output is above" >&2
    exit 1
  fi
  tail -n 1 "$arm64_log"
  bash scripts/test_arm64.sh build-arm64 test
fi
part "All passed"
