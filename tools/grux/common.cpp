// Helpers shared by the CLI's subcommands: thread settings, the data folder, text files, the
// conformance commands' input and output files.
// Errors are grux::Error with one-line messages, like everywhere in the CLI.
#include <fmt/format.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "commands.h"
#include "grux/io.h"
#include "measure/blas.h"

namespace grux::cli {

int set_threads(int k) {
  if (k < 0) throw Error(fmt::format("--threads {} (expected >= 1)", k));
  const int n = k == 0 ? omp_get_num_procs() : k;
  omp_set_num_threads(n);
  measure::blas_set_threads(n);
  return n;
}

std::string default_data_dir() {
  if (const char* env = std::getenv("GRUX_DATA_DIR")) return env;
  // An installed grux (PREFIX/bin/grux) reads PREFIX/share/grux, wherever PREFIX was moved.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed =
        exe.parent_path().parent_path() / GRUX_INSTALL_DATADIR / "grux";
    if (std::filesystem::is_directory(installed / "example", ec)) return installed.string();
  }
  return GRUX_DATA_DIR;  // the source tree this binary was built from
}

std::string default_data_path(const std::string& name) {
  return default_data_dir() + "/" + name;
}

std::string read_text_file(const std::string& path, const std::string& option) {
  // Characters become 8-byte ids in memory: cap the text at 256 MiB (2 GiB of ids).
  constexpr size_t kMax = size_t(256) << 20;
  std::string text;
  try {
    text = read_file(path, kMax);
  } catch (const Error& e) {
    throw Error(fmt::format("{} {}: {}", option, path, e.what()));
  }
  if (text.empty()) throw Error(fmt::format("{} {}: the file is empty", option, path));
  return text;
}

}  // namespace grux::cli

namespace grux::cli {

void run_launched(const char* what, const std::function<void(Communicator&)>& body) {
  const int launched = launched_ranks();
  if (launched <= 1) {
    SingleProcess one;
    body(one);
    return;
  }
  if (!mpi_available())
    throw Error(fmt::format(
        "the MPI launcher started {} processes, but this grux was built without MPI: each {} "
        "would run alone and overwrite the others' files (install libopenmpi-dev and rebuild, "
        "or run one process)",
        launched, what));
  int code = 0;
  {
    MpiSession mpi;
    Communicator& comm = mpi.world();
    // Each rank prints its line before MPI_Finalize: once one rank has exited non-zero,
    // mpirun may end the others.
    try {
      body(comm);
    } catch (const CollectiveError& e) {
      std::fprintf(stderr, "grux: error: %s\n", e.what());
      code = 2;
    } catch (const Interrupted& e) {
      std::fprintf(stderr, "grux: %s\n", e.what());
      code = 130;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "grux: error: rank %d: %s\n", comm.rank(), e.what());
      std::fflush(stderr);
      mpi.abort(2);
    }
    std::fflush(stderr);
  }
  if (code != 0) throw Exit{code};
}

Tensor read_optional_npy(const std::string& path) {
  return path.empty() ? Tensor() : read_npy(path);
}

Tensor read_float_input(const std::string& path) {
  Tensor x = read_npy(path);
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
    throw Error(path + ": dtype " + dtype_name(x.dtype()) + ", expected f32 or f64");
  return x;
}

void check_float_dtype(const std::string& path, const Tensor& t, DType want) {
  if (t.dtype() != want)
    throw Error(path + ": dtype " + dtype_name(t.dtype()) + " does not match the input's " +
                dtype_name(want) + " (mixed dtypes are not allowed)");
}

SafeTensors read_weights(const std::string& path, DType dtype) {
  SafeTensors st = read_safetensors(path);
  for (const auto& [key, t] : st.tensors)
    if (t.dtype() != dtype)
      throw Error(path + ": tensor '" + key + "' has dtype " + dtype_name(t.dtype()) +
                  " but the input has dtype " + dtype_name(dtype) +
                  " (mixed dtypes are not allowed)");
  return st;
}

std::string output_dir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec || !std::filesystem::is_directory(path))
    throw Error(path + ": cannot create output directory" + (ec ? ": " + ec.message() : ""));
  return path;
}

}  // namespace grux::cli
