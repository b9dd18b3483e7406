"""Builds grux._grux with the project's CMake (pyproject.toml holds the package's metadata).

The extension is one CMake target (python/CMakeLists.txt) in a build tree of its own,
build-python/ in the checkout (kept, so a second install only relinks), or the tree named by
GRUX_BUILD_DIR (scripts/test.sh points it at its test build). GRUX_BUILD_JOBS sets the
parallel build jobs (default: all cores)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(grux VERSION ([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = Path(os.environ.get("GRUX_BUILD_DIR", ROOT / "build-python")).resolve()
        args = ["-DGRUX_BUILD_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}"]
        if not (build / "CMakeCache.txt").exists():
            args += ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
                     "-DGRUX_BUILD_TOOLS=OFF", "-DGRUX_BUILD_TESTS=OFF", "-DGRUX_BUILD_BENCH=OFF",
                     "-DGRUX_BUILD_EXAMPLES=OFF", "-DGRUX_INSTALL=OFF"]
        jobs = os.environ.get("GRUX_BUILD_JOBS", str(os.cpu_count() or 1))
        print(f"grux: building the extension in {build} (CMake, {jobs} jobs)", flush=True)
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), *args], check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "grux_python_modules", "-j",
                        jobs], check=True)
        built = sorted((build / "python" / "grux").glob("_grux*.so"))
        if not built:
            raise RuntimeError(f"grux: CMake built no _grux module in {build}/python/grux")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], dest)
        # grux._torch_access, where torch's C++ headers were found (python/CMakeLists.txt): it
        # goes beside _grux, which loads it once torch is imported.
        for f in sorted((build / "python" / "grux").glob("_torch_access*.so"))[-1:]:
            shutil.copyfile(f, dest.parent / f.name)


# setuptools' own build files go under build-python/ too (build/ is the CMake test tree's).
setup(version=version(), ext_modules=[Extension("grux._grux", sources=[])],
      cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": str(ROOT / "build-python" / "setuptools")}})
