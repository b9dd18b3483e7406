#!/usr/bin/env bash
# Configures and builds one grux build tree. Usage: bash scripts/build.sh DIR [cmake args...]
set -euo pipefail
dir=$1
shift
cmake -S "$(dirname "$0")/.." -B "$dir" "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" -j"$(nproc)"
