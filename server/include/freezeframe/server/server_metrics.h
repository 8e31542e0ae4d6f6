#pragma once
// ServerMetrics: what /metrics reports, in Prometheus's text format: requests by how they
// ended, prompt and generated tokens, time to first token, time per output token and
// end-to-end latency as histograms, and the engine's state (running and waiting requests, KV
// blocks, steps) from the worker's snapshot. Thread-safe.

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "freezeframe/server/engine_worker.h"

namespace freezeframe {

/// A Prometheus histogram over fixed bucket bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  /// The metric's lines: NAME_bucket{le="..."} (cumulative), NAME_sum, NAME_count.
  void write(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // one per bound, then +Inf
  double sum_ = 0.0;
  std::uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  /// A request that ended: how, its tokens, and its times in seconds (ttft < 0: no token;
  /// tpot < 0: fewer than two tokens).
  void finished(RequestEnd end, std::int64_t prompt_tokens, std::int64_t generated_tokens,
                double ttft, double tpot, double e2e);
  /// A request refused before it reached the engine, by HTTP status.
  void refused(int status);

  /// The exposition text, with the worker's state.
  [[nodiscard]] std::string text(const WorkerSnapshot& worker) const;

 private:
  mutable std::mutex mutex_;
  std::array<std::uint64_t, 4> ended_{};  // by RequestEnd
  std::uint64_t refused_400_ = 0, refused_401_ = 0, refused_413_ = 0, refused_429_ = 0,
                refused_503_ = 0, refused_other_ = 0;
  std::uint64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_, tpot_, e2e_;
};

}  // namespace freezeframe
