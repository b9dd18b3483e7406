// `grux info`: what this build runs on here: the SIMD target its kernels dispatch to (and the
// others it could), threads, the switches that change results, and the BLAS it measures against.
#include <fmt/format.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "grux/dist.h"
#include "grux/precision.h"
#include "grux/runtime.h"
#include "measure/blas.h"

namespace grux::cli {

namespace {

struct InfoArgs {
  bool simd_targets = false;
};

void run_info(const InfoArgs& a) {
  const std::vector<std::string> targets = simd_targets();
  if (a.simd_targets) {
    for (const std::string& t : targets) fmt::print("{}\n", t);
    return;
  }
  std::string all;
  for (const std::string& t : targets) all += (all.empty() ? "" : " ") + t;
  const char* env_simd = std::getenv("GRUX_SIMD_TARGET");
  fmt::print("grux 0.1.0\n");
  fmt::print("simd: {} (this CPU can run: {}){}\n", simd_target(), all,
             env_simd && *env_simd ? fmt::format("; GRUX_SIMD_TARGET={}", env_simd) : "");
  fmt::print("threads: {} (OpenMP; --threads sets them per command)\n", omp_get_max_threads());
  fmt::print("precision kernels: bf16 {}, int8 {} (--precision of grux gru and grux bench gru)\n",
             precision_kernel(Precision::bf16), precision_kernel(Precision::int8));
  fmt::print("reference kernels: {}\n", reference_kernels() ? "on (GRUX_REFERENCE=1)" : "off");
  fmt::print("mpi: {}\n", mpi_available()
                              ? mpi_library() + " (mpirun -np K grux train | scan | calibrate)"
                              : std::string("no (built without; one process only)"));
  if (measure::blas_available())
    fmt::print(
        "blas: OpenBLAS with its {} kernel{}; only grux bench gemm and grux calibrate "
        "measure it, no operator computes through it\n",
        measure::blas_core(),
        measure::blas_core_is_fallback()
            ? " (a generic fallback: OpenBLAS does not recognise this AVX2 CPU)"
            : "");
  else
    fmt::print(
        "blas: none (OpenBLAS, libopenblas.so.0, not installed: grux bench gemm and grux "
        "calibrate measure grux's GEMM alone; no operator uses a BLAS)\n");
}

}  // namespace

Action add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* c = app.add_subcommand(
      "info",
      "What grux runs on here: the SIMD target its kernels use (results are bit-identical on "
      "every target with FMA: AVX2, AVX3, AVX3_DL; docs/determinism.md), the targets this CPU "
      "could use, threads, the switches that change results (GRUX_REFERENCE, GRUX_SIMD_TARGET) and "
      "the kernel OpenBLAS picked.");
  c->add_flag("--simd-targets", args->simd_targets,
              "print only the SIMD targets this build and CPU can run, best first, one per line "
              "(names for GRUX_SIMD_TARGET)");
  return [args] { run_info(*args); };
}

}  // namespace grux::cli
