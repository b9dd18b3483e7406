#!/usr/bin/env bash
# The Python package as a user gets it, from a configured and built test tree: a wheel built
# with pip and installed into a fresh virtual environment of Debian's python3 that sees
# Debian's numpy, torch and pytest (--system-site-packages), the pytest suite (tests/python)
# run against that installation; then `pip install .` into a second environment, imported.
# Nothing is fetched (--no-index). The extension is the test tree's (GRUX_BUILD_DIR): only
# _grux is built here. Usage: bash scripts/test_python.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
py=/usr/bin/python3  # Debian's: the one its python3-numpy and python3-torch are built for
export GRUX_BUILD_DIR=$build
unset OPENBLAS_CORETYPE GRUX_SIMD_TARGET

venv=$build/python-venv
rm -rf "$venv" "$build/python-dist"
"$py" -m venv --system-site-packages "$venv"
(cd "$root" && "$venv/bin/pip" wheel --quiet --no-build-isolation --no-index --no-deps \
  -w "$build/python-dist" .)
wheel=$(ls "$build"/python-dist/grux-*.whl)
echo "test_python: built $(basename "$wheel")"
"$venv/bin/pip" install --quiet --no-index --no-deps "$wheel"
# From the build tree, so that `import grux` is the installed package, not a source folder.
(cd "$build" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/python")

venv2=$build/python-venv-source
rm -rf "$venv2"
"$py" -m venv --system-site-packages "$venv2"
(cd "$root" && "$venv2/bin/pip" install --quiet --no-build-isolation --no-index .)
(cd "$build" && "$venv2/bin/python" -c "
import grux, grux.torch, numpy as np
out, h = grux.GRU(2, 3)(np.zeros((4, 1, 2), np.float32))
assert out.shape == (4, 1, 3), out.shape
print('test_python: pip install . gives grux', grux.__version__, 'at', grux.__file__)")
