// Shared test helpers (non-inline parts).
#include "test_util.h"

#include <filesystem>
#include <random>

namespace grux::test {

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
