// The MPI Communicator (grux/dist.h). Sums are deterministic whatever algorithm the MPI
// library would pick for MPI_Allreduce: rank j receives every rank's copy of the j-th block
// of the values (MPI_Alltoallv), adds them in rank order, and every rank receives every
// block's sum (MPI_Allgatherv). Each rank sends and receives 2(K-1)/K of the values, as a
// ring allreduce does. Built without MPI, MpiSession says so.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <vector>

#include "grux/dist.h"
#include "grux/error.h"

#ifdef GRUX_HAVE_MPI
#include <mpi.h>
#endif

namespace grux {

#ifdef GRUX_HAVE_MPI

bool mpi_available() {
  return true;
}

std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  MPI_Get_library_version(text, &n);  // allowed before MPI_Init
  std::string s(text, static_cast<size_t>(std::max(0, n)));
  const size_t cut = s.find_first_of("\n,");  // the first line's name and version
  return s.substr(0, cut);
}

namespace {

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> all_gather(const std::string& mine) override {
    const int K = size_;
    long long n = static_cast<long long>(mine.size());
    std::vector<long long> sizes(K);
    MPI_Allgather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, MPI_COMM_WORLD);
    std::vector<int> counts(K), displs(K);
    long long total = 0;
    for (int r = 0; r < K; ++r) {
      if (total + sizes[r] > INT_MAX)
        throw Error(fmt::format("the ranks' messages add up to more than {} bytes", INT_MAX));
      counts[r] = static_cast<int>(sizes[r]);
      displs[r] = static_cast<int>(total);
      total += sizes[r];
    }
    std::string all(static_cast<size_t>(total), '\0');
    MPI_Allgatherv(mine.data(), static_cast<int>(n), MPI_CHAR, all.data(), counts.data(),
                   displs.data(), MPI_CHAR, MPI_COMM_WORLD);
    std::vector<std::string> r(K);
    for (int k = 0; k < K; ++k) r[k] = all.substr(displs[k], counts[k]);
    return r;
  }

  void sum(float* data, int64_t n) override { sum_impl(data, n); }
  void sum(double* data, int64_t n) override { sum_impl(data, n); }

 private:
  template <typename T>
  void sum_impl(T* data, int64_t n) {
    const int K = size_;
    if (K == 1 || n <= 0) return;
    // Pieces of at most 2^24 values keep MPI's int counts and the receive buffer bounded.
    constexpr int64_t kPiece = int64_t(1) << 24;
    std::vector<int> send_counts(K), send_displs(K), recv_counts(K), recv_displs(K);
    std::vector<T> recv;
    for (int64_t off = 0; off < n; off += kPiece) {
      const int64_t m = std::min(kPiece, n - off);
      auto begin = [&](int j) { return static_cast<int>(m * j / K); };
      const int mine = begin(rank_ + 1) - begin(rank_);
      for (int j = 0; j < K; ++j) {
        send_displs[j] = begin(j);
        send_counts[j] = begin(j + 1) - begin(j);
        recv_counts[j] = mine;
        recv_displs[j] = j * mine;
      }
      recv.resize(static_cast<size_t>(mine) * K);
      T* piece = data + off;
      MPI_Alltoallv(piece, send_counts.data(), send_displs.data(), mpi_type<T>(), recv.data(),
                    recv_counts.data(), recv_displs.data(), mpi_type<T>(), MPI_COMM_WORLD);
      T* block = piece + begin(rank_);
      for (int e = 0; e < mine; ++e) {
        T acc = recv[e];
        for (int j = 1; j < K; ++j) acc += recv[static_cast<size_t>(j) * mine + e];
        block[e] = acc;
      }
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, piece, send_counts.data(),
                     send_displs.data(), mpi_type<T>(), MPI_COMM_WORLD);
    }
  }

  int rank_ = 0, size_ = 1;
};

}  // namespace

MpiSession::MpiSession() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) throw Error("MPI is already initialized in this process (one MpiSession)");
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  world_ = std::make_unique<MpiWorld>();
}

MpiSession::~MpiSession() {
  world_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

#else  // built without MPI

bool mpi_available() {
  return false;
}

std::string mpi_library() {
  return "";
}

MpiSession::MpiSession() {
  throw Error(
      "this grux was built without MPI (install Open MPI, libopenmpi-dev, and rebuild; "
      "docs/building.md)");
}

MpiSession::~MpiSession() = default;

void MpiSession::abort(int code) {
  std::_Exit(code);
}

#endif

}  // namespace grux
