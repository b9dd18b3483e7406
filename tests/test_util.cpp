// Shared test helpers (non-inline parts).
#include "test_util.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

namespace grux::test {

std::vector<std::string> golden_files(const std::string& dir,
                                      const std::vector<std::string>& prefixes) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    for (const auto& p : prefixes)
      if (f.rfind(p, 0) == 0 && e.path().extension() == ".safetensors") files.push_back(f);
  }
  std::sort(files.begin(), files.end());
  return files;
}

int exit_code_in_child(const std::function<int()>& body, unsigned timeout_s) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    alarm(timeout_s);
    int code = 125;
    try {
      code = body();
    } catch (...) {
    }
    _exit(code);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool cap_address_space(size_t headroom) {
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  if (pages <= 0) return false;
  const rlim_t cap = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + headroom;
  const rlimit limit{cap, cap};
  return setrlimit(RLIMIT_AS, &limit) == 0;
}

TempDir::TempDir() {
  std::random_device rd;
  path = (std::filesystem::temp_directory_path() /
          ("grux_test_" + std::to_string(rd()) + std::to_string(rd())))
             .string();
  std::filesystem::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace grux::test
