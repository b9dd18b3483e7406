# Cross-compiling grux for 64-bit Arm Linux (aarch64) on a Debian machine of another
# architecture, with Debian's cross compiler (g++-aarch64-linux-gnu) and its arm64 multiarch
# libraries (/usr/lib/aarch64-linux-gnu); the programs run under qemu-user (qemu-aarch64).
# scripts/install-deps.sh installs all of it, scripts/test_arm64.sh builds and runs the tests:
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
# ONNX's arm64 package cannot be installed beside the machine's own (both hold
# /usr/lib/libonnxifi.so), so scripts/install-deps.sh unpacks it into a folder of its own,
# GRUX_AARCH64_ONNX_ROOT (/opt/grux-aarch64-onnx unless set in the environment).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Test programs (gtest_discover_tests lists them at build time) run through qemu. Without -L:
# the multiarch loader and libraries are found at their own paths (/lib/ld-linux-aarch64.so.1,
# /usr/lib/aarch64-linux-gnu), which is what the programs name.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)

if(DEFINED ENV{GRUX_AARCH64_ONNX_ROOT})
  set(GRUX_AARCH64_ONNX_ROOT $ENV{GRUX_AARCH64_ONNX_ROOT})
else()
  set(GRUX_AARCH64_ONNX_ROOT /opt/grux-aarch64-onnx)
endif()
# Libraries, headers and CMake packages from the arm64 paths only (and ONNX's folder);
# programs (protoc) from this machine.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu ${GRUX_AARCH64_ONNX_ROOT} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# The machine's own libraries and packages are never a match for an arm64 program.
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu
  /usr/lib/x86_64-linux-gnu/cmake)
# pkg-config (Highway): this machine's, reading the arm64 .pc files only (their paths are
# absolute multiarch paths, so no sysroot prefix is needed).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
unset(ENV{PKG_CONFIG_PATH})
