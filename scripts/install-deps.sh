#!/usr/bin/env bash
# Installs the Debian packages grux needs to build and test, only those that are missing.
# Usage: bash scripts/install-deps.sh   (as root, or with sudo available)
set -euo pipefail

packages=(
  g++ cmake make pkg-config
  libopenblas-openmp-dev   # BLAS (GEMM), OpenMP flavour
  libhwy-dev               # Highway: portable SIMD, vectorized exp/tanh
  libcli11-dev             # command-line parsing
  nlohmann-json3-dev       # JSON (safetensors headers, reports)
  libfmt-dev               # formatting
  libgtest-dev libgmock-dev googletest  # tests
  libbenchmark-dev         # benches
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
