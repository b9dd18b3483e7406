#!/usr/bin/env bash
# Checks that every tracked C and C++ source is formatted as .clang-format says; prints the
# files that are not and how to fix them. Usage: bash scripts/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null ||
  { echo "check_format: clang-format is not installed (bash scripts/install-deps.sh)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp')
[ ${#files[@]} -gt 0 ] || { echo "check_format: no source found (not a git checkout?)" >&2; exit 1; }
if [ "${1:-}" = --fix ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf '  %s\n' "${bad[@]}" >&2
  echo "check_format: ${#bad[@]} of ${#files[@]} files are not formatted (above);" \
       "bash scripts/check_format.sh --fix formats them" >&2
  exit 1
fi
echo "check_format: all ${#files[@]} C and C++ sources formatted ($(clang-format --version))"
