#pragma once
// FIFOs for tests of readers that must refuse them before opening them: opening a FIFO to read
// waits for a writer, so a reader that opened one first would hang. refusal_of_fifo runs the
// reader on a thread and, should it still run after a while, opens the FIFO to write and
// closes it, so the blocked open returns and the test fails instead of hanging.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include "freezeframe/base/error.h"
#include "support/scratch_files.h"

namespace freezeframe::testing {

/// Makes the FIFO `name` in the scratch folder and returns its path.
inline std::string scratch_fifo(const std::string& name) {
  const std::filesystem::path path = scratch_dir() / name;
  std::filesystem::remove(path);
  EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << "mkfifo " << path;
  return path.string();
}

/// The message of the Error `read` throws for the FIFO at `fifo` ("accepted" when it throws
/// none); fails the test when `read` blocks.
template <class Read>
std::string refusal_of_fifo(const std::string& fifo, Read read) {
  std::future<std::string> done = std::async(std::launch::async, [&read]() -> std::string {
    try {
      read();
    } catch (const Error& e) {
      return e.message();
    }
    return "accepted";
  });
  if (done.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) {
    ADD_FAILURE() << "blocked opening the FIFO " << fifo;
    // A writer that comes and goes releases the reader (it then reads an empty file).
    while (done.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  return done.get();
}

}  // namespace freezeframe::testing
