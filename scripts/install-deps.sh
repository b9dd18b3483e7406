#!/usr/bin/env bash
# Installs the Debian packages grux needs, only those that are missing.
# Usage: bash scripts/install-deps.sh          everything the tests need (scripts/test.sh), then
#                                              the HTML report's plotting library
#                                              (scripts/install-web-assets.sh)
#        bash scripts/install-deps.sh --main   only what the main job (scripts/demo.sh) needs:
#                                              a compiler, CMake and the libraries of the engine
#                                              and the command-line tool
# (as root, or with sudo available)
set -euo pipefail
here=$(dirname "$0")

packages=(
  gcc g++ cmake make pkg-config  # the compiler (with OpenMP's libgomp) and the build
  libhwy-dev               # Highway: portable SIMD, vectorized exp/tanh
  libcli11-dev             # command-line parsing
  nlohmann-json3-dev       # JSON (safetensors headers, reports)
  libfmt-dev               # formatting
  libonnx-dev libprotobuf-dev  # ONNX model files (ONNX's protobuf classes)
)
main_only=0
if [ "${1:-}" = --main ]; then
  main_only=1
elif [ -n "${1:-}" ]; then
  echo "install-deps: unknown argument $1 (expected nothing or --main)" >&2
  exit 2
else
  packages+=(
    dpkg-dev file            # cpack -G DEB (dpkg-shlibdeps) in scripts/test_package.sh
    libopenblas0-openmp      # the BLAS peer of grux bench gemm / calibrate (loaded at run time)
    libgtest-dev libgmock-dev googletest  # tests
    libbenchmark-dev         # benches
    clang-format             # the format check of scripts/test.sh
    clang libclang-rt-14-dev # libFuzzer: the model-file readers' fuzzers (tests/fuzz)
    python3                  # the browser test's driver and the doc test (standard library)
    python3-dev pybind11-dev # the Python package's extension (python/)
    python3-venv python3-pip python3-setuptools python3-wheel  # pip install . / pip wheel
    python3-numpy python3-torch python3-pytest  # the Python package and its tests
    python3-onnx             # onnx.checker and onnx.helper: the ONNX files' tests
    libtorch-dev             # torch's C++ headers: grux._torch_access reads tensors through them
    chromium chromium-driver # the HTML cost report opened in headless Chromium (tests)
    openmpi-bin libopenmpi-dev  # MPI: multi-process training and scans, tested with 2 ranks
    procps                   # pkill: the MPI tests signal mpiexec and its ranks
  )
fi

missing=()
for p in "${packages[@]}"; do
  if ! [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"install ok installed"* ]]; then
    missing+=("$p")
  fi
done
# npm installs the report's plotting library; Debian's npm package brings Node.js. A Node.js
# installed some other way, with its own npm, is used as it is.
[ "$main_only" = 1 ] || command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
[ "$main_only" = 1 ] || bash "$here/install-web-assets.sh"
