#!/usr/bin/env bash
# Installs the Debian packages grux needs to build and test, only those that are missing, then
# the plotting library of the HTML cost reports (scripts/install-web-assets.sh).
# Usage: bash scripts/install-deps.sh   (as root, or with sudo available)
set -euo pipefail
here=$(dirname "$0")

packages=(
  gcc g++ cmake make pkg-config
  dpkg-dev file            # cpack -G DEB (dpkg-shlibdeps) in scripts/test_package.sh
  libopenblas-openmp-dev   # BLAS (GEMM), OpenMP flavour
  libhwy-dev               # Highway: portable SIMD, vectorized exp/tanh
  libcli11-dev             # command-line parsing
  nlohmann-json3-dev       # JSON (safetensors headers, reports)
  libfmt-dev               # formatting
  libgtest-dev libgmock-dev googletest  # tests
  libbenchmark-dev         # benches
  python3                  # the browser test's driver (standard library only)
  python3-dev pybind11-dev # the Python package's extension (python/)
  python3-venv python3-pip python3-setuptools python3-wheel  # pip install . / pip wheel
  python3-numpy python3-torch python3-pytest  # the Python package and its tests
  libtorch-dev             # torch's C++ headers: grux._torch_access reads tensors through them
  chromium chromium-driver # the HTML cost report opened in headless Chromium (tests)
  openmpi-bin libopenmpi-dev  # MPI: multi-process training and scans, tested with 2 ranks
  procps                   # pkill: the MPI tests signal mpiexec and its ranks
)

missing=()
for p in "${packages[@]}"; do
  if ! [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"install ok installed"* ]]; then
    missing+=("$p")
  fi
done
# npm installs the report's plotting library; Debian's npm package brings Node.js. A Node.js
# installed some other way, with its own npm, is used as it is.
command -v npm >/dev/null || missing+=(npm)
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
bash "$here/install-web-assets.sh"
