#pragma once
// Files for tests that feed readers bytes: read a fixture whole, write bytes to a scratch file
// in a folder of the process's own, removed when the process ends.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

namespace freezeframe::testing {

inline std::vector<char> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// A folder of the process's own for the files the tests write, removed when it ends.
inline const std::filesystem::path& scratch_dir() {
  static const struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("freezeframe_test_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

/// Writes `bytes` to the scratch file `name` and returns its path.
inline std::string scratch(const std::vector<char>& bytes, const std::string& name) {
  const std::filesystem::path path = scratch_dir() / name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return path.string();
}

}  // namespace freezeframe::testing
