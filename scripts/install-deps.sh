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
  # aarch64: the cross compiler, qemu-user and the arm64 libraries (scripts/test_arm64.sh);
  # ONNX's below. Not on an Arm machine, whose own build is the arm64 one.
  if [ "$(uname -m)" != aarch64 ]; then
    cross=1
    packages+=(g++-aarch64-linux-gnu qemu-user libgomp1:arm64 libhwy-dev:arm64 libfmt-dev:arm64
      libprotobuf-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64)
  fi
fi
cross=${cross:-0}
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
# Debian's arm64 packages need the architecture added to dpkg's list (and apt's lists read again).
if [ "$cross" = 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "install-deps: adding the arm64 architecture (dpkg --add-architecture arm64)"
  "${sudo_cmd[@]}" dpkg --add-architecture arm64
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
  if [ ${#sudo_cmd[@]} -gt 0 ] && ! command -v sudo >/dev/null; then
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# ONNX for arm64: its package cannot be installed beside this machine's own (both hold
# /usr/lib/libonnxifi.so, a Multi-Arch conflict), so its files are unpacked into a folder of
# their own, which cmake/toolchain-aarch64.cmake searches.
onnx_arm64=${GRUX_AARCH64_ONNX_ROOT:-/opt/grux-aarch64-onnx}
if [ "$cross" = 1 ] && ! [ -f "$onnx_arm64/usr/lib/aarch64-linux-gnu/cmake/ONNX/ONNXConfig.cmake" ]; then
  echo "install-deps: unpacking ONNX's arm64 packages into $onnx_arm64"
  debs=$(mktemp -d)
  (cd "$debs" && "${sudo_cmd[@]}" apt-get download -q libonnx-dev:arm64 libonnx1:arm64 libonnxifi:arm64)
  for deb in "$debs"/*.deb; do "${sudo_cmd[@]}" dpkg-deb -x "$deb" "$onnx_arm64"; done
  rm -rf "$debs"
fi
[ "$main_only" = 1 ] || bash "$here/install-web-assets.sh"
