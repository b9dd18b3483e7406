// Whole-file I/O: atomic writes (temporary file in the same folder, fsync, rename, fsync the
// folder) and bounded reads of regular files. Errors name the path and the system's reason.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "grux/error.h"
#include "grux/io.h"

namespace grux {
namespace {

std::string errno_str(int err) {
  return std::strerror(err);
}

// The folder holding `path`, for creating the temporary file next to it (rename is only
// atomic within one file system) and for fsyncing the directory entry afterwards.
std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Unique even when several processes or threads write the same target at once: the pid
// separates processes, the random part separates threads and retries; O_EXCL catches the rest.
std::string temp_name(const std::string& path) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}.tmp.{}.{:016x}", path, static_cast<long>(::getpid()), rng());
}

// Closes a descriptor on scope exit unless released; keeps error paths from leaking fds.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now and reports the result: close() may be where a deferred write error surfaces.
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

void write_all(int fd, const std::string& bytes, const std::string& path, const std::string& tmp) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("cannot write '{}': writing temporary file '{}': {}", path, tmp,
                              errno_str(errno)));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  GRUX_CHECK(!path.empty(), "cannot write '': empty path");
  const std::string dir = parent_dir(path);
  const std::string tmp = temp_name(path);

  // 0666 filtered by the umask, the same permissions a plain fopen("w") would give.
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (fd.get() < 0) {
    throw Error(fmt::format("cannot write '{}': cannot create temporary file '{}': {}", path, tmp,
                            errno_str(errno)));
  }
  try {
    write_all(fd.get(), bytes, path, tmp);
    // Without fsync before rename, a crash can leave the new name pointing at an empty file.
    if (::fsync(fd.get()) != 0) {
      throw Error(fmt::format("cannot write '{}': fsync of '{}': {}", path, tmp, errno_str(errno)));
    }
    if (fd.close() != 0) {
      throw Error(fmt::format("cannot write '{}': close of '{}': {}", path, tmp, errno_str(errno)));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      throw Error(
          fmt::format("cannot write '{}': rename from '{}': {}", path, tmp, errno_str(errno)));
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }

  // The rename is durable only once the directory entry reaches the disk.
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0) {
    throw Error(fmt::format("wrote '{}' but cannot open its folder '{}' to fsync it: {}", path, dir,
                            errno_str(errno)));
  }
  // Some file systems (FUSE, network mounts) reject fsync on a directory with EINVAL; the data
  // is already in place and there is nothing more this process can do about durability.
  if (::fsync(dfd.get()) != 0 && errno != EINVAL) {
    throw Error(fmt::format("wrote '{}' but fsync of its folder '{}' failed: {}", path, dir,
                            errno_str(errno)));
  }
}

std::string read_file(const std::string& path, size_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error(fmt::format("cannot open '{}': {}", path, errno_str(errno)));

  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    throw Error(fmt::format("cannot read '{}': {}", path, errno_str(errno)));
  }
  // Directories, FIFOs and devices would either fail oddly or block or never end.
  if (!S_ISREG(st.st_mode)) {
    throw Error(fmt::format("cannot read '{}': not a regular file", path));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    throw Error(fmt::format("cannot read '{}': file is {} bytes, larger than the limit of {} bytes",
                            path, size, max_bytes));
  }

  // Read to EOF rather than trusting st_size: the file may change while we read it, and some
  // regular files (/proc) report size 0. The limit is checked again as data arrives.
  // One byte past the limit is how a file that grew is told apart from one that fits exactly.
  const size_t cap = max_bytes < SIZE_MAX ? max_bytes + 1 : max_bytes;
  std::string out;
  out.resize(std::min(cap, static_cast<size_t>(size) + 1));
  size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      if (got > max_bytes) {
        throw Error(
            fmt::format("cannot read '{}': file grew past the limit of {} bytes", path, max_bytes));
      }
      out.resize(std::min(cap, out.size() * 2 + 4096));
    }
    const ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("cannot read '{}': {}", path, errno_str(errno)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) {
    throw Error(
        fmt::format("cannot read '{}': file grew past the limit of {} bytes", path, max_bytes));
  }
  out.resize(got);
  return out;
}

}  // namespace grux
