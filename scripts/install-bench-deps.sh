#!/usr/bin/env bash
# Installs what the peer comparison (bench/compare.py) needs beyond the build: Debian's
# PyTorch and NumPy, and oneDNN (the oneDNN runner is built when libdnnl-dev is present;
# its CMake package needs the OpenCL development files, ocl-icd-opencl-dev).
set -euo pipefail
bash "$(dirname "$0")/install-deps.sh"
packages=(python3-torch python3-numpy libdnnl-dev ocl-icd-opencl-dev)
missing=()
for p in "${packages[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"install ok installed"* ]] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "install-bench-deps: all present"; exit 0; }
echo "install-bench-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
