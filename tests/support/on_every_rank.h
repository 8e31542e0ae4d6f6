#pragma once
// Runs one body per rank of a group, each on its own host thread, as the ranks of a
// LocalGroup must run.

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace freezeframe::testing {

/// Runs body(rank) on one thread per rank; rethrows the first rank's exception.
inline void on_every_rank(int world, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace freezeframe::testing
