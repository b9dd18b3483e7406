#!/usr/bin/env bash
# grux as other projects take it in (docs/building.md), from a configured and built tree:
#   - installs it static and shared (cmake --install) and builds the Debian packages (cpack);
#   - checks the installed files: every public header, libraries, SONAME, that the shared
#     library exports the public API and nothing of grux's internals, that the installed CLI
#     runs on its installed data;
#   - builds examples/consumer with find_package(grux) against the static install, the shared
#     install and the unpacked Debian packages, and runs it (PyTorch's numbers on data/example);
#   - builds the C programs examples/c_api/stream.c and effect.c with `pkg-config --cflags --libs grux`
#     (shared) and `--static` (static), and runs both;
#   - builds examples/plugin (a shared object linking the static library), loads it with dlopen
#     from a host that knows nothing of grux, and checks it exports no grux symbol;
#   - configures a host project that adds grux with add_subdirectory: only grux's libraries,
#     and the host's build type left alone.
# Toggling BUILD_SHARED_LIBS relinks the two libraries only (their objects do not change); the
# tree is left with the setting it had.
# Usage: bash scripts/test_package.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jobs=$(nproc)
was_shared=$(sed -n 's/^BUILD_SHARED_LIBS:BOOL=//p' "$build/CMakeCache.txt")

fail() { echo "test_package: $*" >&2; exit 1; }
quiet() {  # runs a command, printing its output only when it fails
  local log=$work/log
  "$@" >"$log" 2>&1 || { cat "$log"; fail "failed: $*"; }
}
reconfigure() {
  quiet cmake -S "$src" -B "$build" -DBUILD_SHARED_LIBS="$1"
  quiet cmake --build "$build" -j"$jobs" --target grux grux_tools
}

echo "== Install static, install shared, Debian packages"
reconfigure OFF
quiet cmake --install "$build" --prefix "$work/static"
reconfigure ON
quiet cmake --install "$build" --prefix "$work/shared"
(cd "$build" && quiet cpack -G DEB -B "$work/deb")
reconfigure "${was_shared:-OFF}"
ls "$work"/deb/*.deb | xargs -n1 basename
for deb in "$work"/deb/*.deb; do dpkg-deb -x "$deb" "$work/debroot"; done

echo "== Installed files"
soversion=$(sed -n 's/^project(grux VERSION \([0-9]*\)\.\([0-9]*\)\..*/\1.\2/p' CMakeLists.txt)
[ -n "$soversion" ] || fail "cannot read the version from CMakeLists.txt"
for f in include/grux/grux.h include/grux/gru.h include/grux/version.h include/grux/export.h \
         lib/cmake/grux/gruxConfig.cmake lib/cmake/grux/gruxConfigVersion.cmake \
         lib/pkgconfig/grux.pc bin/grux; do
  [ -f "$work/static/$f" ] || fail "static install lacks $f"
  [ -f "$work/shared/$f" ] || fail "shared install lacks $f"
done
# Every public header (a header that includes one left out breaks every consumer).
for h in include/grux/*.h; do
  [ -f "$work/static/$h" ] || fail "the install lacks $h"
done
# The installed CLI finds its data under PREFIX/share/grux, not in this source tree.
data_default=$("$work/static/bin/grux" demo --help)
grep -qF "$work/static/share/grux" <<<"$data_default" ||
  fail "the installed grux does not default to its installed data ($work/static/share/grux)"
quiet "$work/static/bin/grux" demo --reps 1
[ -f "$work/static/lib/libgrux.a" ] && [ -f "$work/static/lib/libgrux_tools.a" ] ||
  fail "static install lacks libgrux.a or libgrux_tools.a"
so=$work/shared/lib/libgrux.so.$soversion
[ -L "$work/shared/lib/libgrux.so" ] && [ -L "$so" ] || fail "shared install lacks libgrux.so -> $(basename "$so")"
dynamic=$(readelf -d "$so")  # captured: `| grep -q` under pipefail can fail on SIGPIPE
grep -q "SONAME.*\[libgrux.so.$soversion\]" <<<"$dynamic" || fail "libgrux's SONAME is not libgrux.so.$soversion"
[ -f "$work/debroot/usr/lib/libgrux.so.$soversion" ] && [ -f "$work/debroot/usr/include/grux/grux.h" ] ||
  fail "the Debian packages lack the library or the headers"
# Exported: the C API and the C++ API; hidden: kernels (grux::cpu), drivers (grux::ops).
exports=$(nm -DC --defined-only "$so")
for sym in grux_model_load grux_stream_process 'grux::Gru::forward' 'grux::Tensor::zeros' \
           'typeinfo for grux::Error'; do
  grep -qF "$sym" <<<"$exports" || fail "libgrux.so does not export $sym"
done
internal=$(grep -E 'grux::(cpu|ops|cost_detail)::' <<<"$exports" || true)
[ -z "$internal" ] || { head -3 <<<"$internal"; fail "libgrux.so exports internal symbols (above)"; }
echo "libgrux.so.$soversion: $(wc -l <<<"$exports") symbols exported, no internals"
# The engine needs Highway and OpenMP only: no library, package file or Debian package of grux
# names OpenBLAS (the peer of grux bench gemm and grux calibrate, loaded at run time).
for lib in "$so" "$work/shared/lib/libgrux_tools.so.$soversion"; do
  needs=$(readelf -d "$lib")
  if grep -qi "NEEDED.*blas" <<<"$needs"; then fail "$(basename "$lib") needs a BLAS"; fi
done
grep -qi blas "$work/shared/lib/pkgconfig/grux.pc" "$work/static/lib/pkgconfig/grux.pc" &&
  fail "grux.pc names OpenBLAS"
grep -rqi blas "$work/shared/lib/cmake/grux" "$work/static/lib/cmake/grux" &&
  fail "the installed CMake package names OpenBLAS"
debdeps=$(for deb in "$work"/deb/*.deb; do dpkg-deb -f "$deb" Depends; done)
if grep -qi blas <<<"$debdeps"; then fail "a Debian package depends on a BLAS: $debdeps"; fi
echo "no library, package file or Debian package needs OpenBLAS"

echo "== CMake consumer (find_package) against the static, shared and Debian installs"
for kind in static shared debroot; do
  prefix=$work/$kind
  [ $kind = debroot ] && prefix=$work/debroot/usr
  quiet cmake -S examples/consumer -B "$work/consumer-$kind" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release
  quiet cmake --build "$work/consumer-$kind"
  LD_LIBRARY_PATH=$prefix/lib "$work/consumer-$kind/consumer" data/example
done
# Outputs captured before grep -q: under pipefail, grep exiting early can SIGPIPE the writer.
needed=$(readelf -d "$work/consumer-shared/consumer")
grep -q "NEEDED.*\[libgrux.so.$soversion\]" <<<"$needed" || fail "the shared consumer does not load libgrux.so"
needed=$(readelf -d "$work/consumer-static/consumer")
if grep -q "libgrux.so" <<<"$needed"; then fail "the static consumer loads libgrux.so"; fi

echo "== C program with pkg-config (shared, then --static)"
PKG_CONFIG_PATH=$work/shared/lib/pkgconfig quiet gcc -std=c99 -Wall -Wextra -pedantic -Werror \
  examples/c_api/stream.c -o "$work/stream-shared" \
  $(PKG_CONFIG_PATH=$work/shared/lib/pkgconfig pkg-config --cflags --libs grux) -lm
LD_LIBRARY_PATH=$work/shared/lib "$work/stream-shared" data/example/gru.safetensors
PKG_CONFIG_PATH=$work/static/lib/pkgconfig quiet gcc -std=c99 -Wall -Wextra -pedantic -Werror \
  examples/c_api/stream.c -o "$work/stream-static" \
  $(PKG_CONFIG_PATH=$work/static/lib/pkgconfig pkg-config --static --cflags --libs grux) -lm
"$work/stream-static" data/example/gru.safetensors
# The real-time example (docs/realtime.md): an effect (GRU + head + skip) in blocks of 64 frames.
PKG_CONFIG_PATH=$work/static/lib/pkgconfig quiet gcc -std=c99 -Wall -Wextra -pedantic -Werror \
  examples/c_api/effect.c -o "$work/effect-static" \
  $(PKG_CONFIG_PATH=$work/static/lib/pkgconfig pkg-config --static --cflags --libs grux) -lm
"$work/effect-static" tests/reference/golden/capi/model_residual.safetensors rnn. fc.

echo "== A plugin (shared object linking the static library) loaded with dlopen"
quiet cmake -S examples/plugin -B "$work/plugin" -DCMAKE_PREFIX_PATH="$work/static" -DCMAKE_BUILD_TYPE=Release
quiet cmake --build "$work/plugin"
"$work/plugin/plugin_host" "$work/plugin/gru_plugin.so" data/example/gru.safetensors
leaked=$(nm -DC --defined-only "$work/plugin/gru_plugin.so" | grep grux || true)
[ -z "$leaked" ] || { head -3 <<<"$leaked"; fail "the plugin exports grux symbols (above)"; }
echo "== As a subproject (add_subdirectory): only the libraries, no forced build type"
mkdir -p "$work/host"
cat >"$work/host/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.25)
project(host LANGUAGES CXX)
add_subdirectory("$src" grux)
add_executable(app app.cpp)
target_link_libraries(app PRIVATE grux::grux)
EOF
echo 'int main() {}' >"$work/host/app.cpp"
quiet cmake -S "$work/host" -B "$work/host-build"
targets=$(cmake --build "$work/host-build" --target help)
grep -qw "grux" <<<"$targets" || fail "the subproject defines no grux target"
extra=$(grep -E "test_|bench_|grux_cli|grux_example" <<<"$targets" || true)
[ -z "$extra" ] || { head -3 <<<"$extra"; fail "the subproject builds tests, benches, examples or the CLI (above)"; }
[ -z "$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$work/host-build/CMakeCache.txt")" ] ||
  fail "the subproject set the host's CMAKE_BUILD_TYPE"
echo "test_package: all checks passed"
