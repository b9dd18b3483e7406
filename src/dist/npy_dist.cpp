// One .npy written by every rank (grux/dist.h): rank 0 creates a temporary file beside the
// target with the header and the full size, each rank writes its part at its offsets
// (pwrite), and rank 0 syncs the file and renames it into place once every rank has
// succeeded; on any rank's error every rank throws it and the temporary file is removed.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "grux/dist.h"
#include "grux/io.h"

namespace grux {

namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void pwrite_all(int fd, const char* p, size_t n, off_t at, const std::string& tmp) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, at);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
    at += w;
  }
}

}  // namespace

void dist_write_npy(Communicator& comm, const std::string& path, const Tensor& part_in,
                    int64_t dim) {
  std::string error, sig;
  Tensor part;
  int64_t d = 0;
  try {
    if (!part_in.defined()) throw Error("dist_write_npy: the part is undefined");
    const int64_t r = part_in.dim();
    if (dim < -r || dim >= r)
      throw Error(fmt::format("dist_write_npy: dim {} is out of range for {} dimensions", dim, r));
    d = dim < 0 ? dim + r : dim;
    part = part_in.contiguous();
    Shape s = part.shape();
    s.erase(s.begin() + d);
    sig = fmt::format("{} {}", shape_str(s), dtype_name(part.dtype()));
  } catch (const Error& e) {
    error = e.what();
  }
  agree_no_error(comm, error);
  agree_same(comm, "part shape (without the split dimension) and dtype", sig);
  // Where this rank's part starts along d, and the whole array's shape.
  const std::vector<std::string> lengths = comm.all_gather(std::to_string(part.size(d)));
  int64_t first = 0, total = 0;
  for (int k = 0; k < comm.size(); ++k) {
    const int64_t n = std::stoll(lengths[k]);
    if (k < comm.rank()) first += n;
    total += n;
  }
  Shape whole = part.shape();
  whole[d] = total;
  const std::string header = npy_header(whole, part.dtype());
  const size_t item = dtype_size(part.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= whole[i];
  for (int64_t i = d + 1; i < static_cast<int64_t>(whole.size()); ++i) inner *= whole[i];

  // 1. Rank 0 creates the temporary file at its full size.
  std::string tmp;
  if (comm.rank() == 0) {
    tmp = fmt::format("{}.tmp.{}.{:016x}", path, static_cast<long>(::getpid()),
                      std::mt19937_64{std::random_device{}()}());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
      error =
          fmt::format("cannot write '{}': cannot create '{}': {}", path, tmp, std::strerror(errno));
      tmp.clear();
    } else {
      try {
        pwrite_all(fd, header.data(), header.size(), 0, tmp);
        const off_t size = static_cast<off_t>(header.size() + outer * total * inner * item);
        if (::ftruncate(fd, size) != 0)
          throw Error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
      } catch (const Error& e) {
        error = e.what();
      }
      ::close(fd);
    }
  }
  tmp = comm.all_gather(tmp)[0];
  auto cleanup_and_agree = [&](const std::string& err) {
    const std::vector<std::string> all = comm.all_gather(err);
    bool failed = false;
    for (const std::string& e : all) failed = failed || !e.empty();
    if (failed && comm.rank() == 0 && !tmp.empty()) ::unlink(tmp.c_str());
    agree_no_error(comm, err);
  };
  cleanup_and_agree(error);

  // 2. Every rank writes its slabs: for each index before d, its rows along d are contiguous.
  try {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      throw Error(fmt::format("cannot open '{}' (the folder must be one every rank sees): {}", tmp,
                              std::strerror(errno)));
    try {
      const size_t slab = static_cast<size_t>(part.size(d) * inner) * item;
      const char* src = static_cast<const char*>(part.raw_data());
      for (int64_t o = 0; o < outer && slab > 0; ++o)
        pwrite_all(fd, src + o * slab, slab,
                   static_cast<off_t>(header.size() + ((o * total + first) * inner) * item), tmp);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0)
      throw Error(fmt::format("cannot write '{}': close: {}", tmp, std::strerror(errno)));
  } catch (const Error& e) {
    error = e.what();
  }
  cleanup_and_agree(error);

  // 3. Rank 0 syncs the file (every rank's pages of it: their close() has handed them to the
  // file system, which a network file system does on close), renames it into place and syncs
  // the folder. One fsync, not one per rank: each would flush the others' pages too.
  if (comm.rank() == 0) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0)
      error = fmt::format("cannot write '{}': fsync: {}", tmp, std::strerror(errno));
    if (fd >= 0) ::close(fd);
  }
  cleanup_and_agree(error);
  if (comm.rank() == 0) {
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      error =
          fmt::format("cannot write '{}': rename from '{}': {}", path, tmp, std::strerror(errno));
    } else {
      const int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
      }
    }
  }
  cleanup_and_agree(error);
}

}  // namespace grux
