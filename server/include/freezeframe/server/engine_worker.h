#pragma once
// EngineWorker: the one thread that owns the engine. HTTP threads submit requests through a
// queue and get a RequestChannel each, on which the worker posts the request's tokens as its
// steps draw them and, at the end, why it ended; the worker runs the generation loop
// (continuous batching: admission, chunked prefill, decodes first, preemption) as long as any
// request waits or runs, and sleeps otherwise. A channel cancelled by its HTTP thread (the
// client went away, or a stop string ended the text) is aborted at the next step boundary, its
// KV blocks back in the pool.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/serving/continuous_batcher.h"
#include "freezeframe/serving/generation_loop.h"
#include "freezeframe/serving/token_source.h"

namespace freezeframe {

/// How a request ended, as the API reports it.
enum class RequestEnd {
  kStop,    ///< a stop token (or, told by the HTTP side, a stop string)
  kLength,  ///< max_tokens, or the end of the context
  kAbort,   ///< cancelled, or the server shutting down
  kError,   ///< refused by the batcher, or the engine failed (`error` says why)
};

/// One request's way back from the engine thread. Thread-safe.
class RequestChannel {
 public:
  /// What arrived since the last take(): tokens in order, and the end once it came.
  struct Batch {
    std::vector<std::int32_t> tokens;
    std::optional<RequestEnd> end;
    std::string error;
  };
  /// Waits until tokens or the end arrive, or `timeout` passes (then an empty batch).
  Batch take(std::chrono::milliseconds timeout);
  /// Asks the engine thread to end the request (its client is gone, or the text is done).
  void cancel() { cancelled_.store(true); }
  [[nodiscard]] bool cancelled() const { return cancelled_.load(); }

  // The engine thread's side.
  void post(std::int32_t token);
  void close(RequestEnd end, std::string error = {});

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  Batch pending_;
  std::atomic<bool> cancelled_{false};
};

/// The worker's state, for /health and /metrics.
struct WorkerSnapshot {
  int running = 0;
  int waiting = 0;
  std::int32_t blocks_total = 0;
  std::int32_t blocks_free = 0;            ///< free, or cached and held by no request
  std::int32_t blocks_cached = 0;          ///< in the prefix cache, held or not
  std::int64_t prefix_queried_tokens = 0;  ///< prompt tokens admitted requests looked up
  std::int64_t prefix_hit_tokens = 0;      ///< ... found cached
  long steps = 0;
  long steps_by_mode[3] = {0, 0, 0};  ///< indexed by RuntimeMode, where the source says
  long preemptions = 0;
  bool accepting = true;
  std::string failure;  ///< why the engine stopped, empty while it runs
};

class EngineWorker {
 public:
  /// Starts the engine thread over `source` (used on that thread only; it must outlive the
  /// worker) within `limits`, with automatic prefix caching unless `prefix_caching` is false.
  EngineWorker(const DeploymentLimits& limits, TokenSource& source, bool prefix_caching = true);
  ~EngineWorker();
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  /// Queues `request` (its id is the worker's to give). The channel reports its tokens and
  /// end; a request the batcher refuses ends at once with kError. After shutdown() the
  /// channel ends at once with kAbort.
  std::shared_ptr<RequestChannel> submit(GenerationRequest request);

  /// Stops taking requests; with `finish`, lets those queued and running end (at most
  /// `grace`), then aborts what is left; joins the thread. Idempotent, from any thread.
  void shutdown(bool finish, std::chrono::milliseconds grace = std::chrono::seconds(30));

  /// The state as of the last step: no older than any token a channel has been handed.
  [[nodiscard]] WorkerSnapshot snapshot() const;
  [[nodiscard]] const DeploymentLimits& limits() const { return limits_; }

 private:
  void run();
  /// Copies the loop's state into snapshot_ (engine thread, mutex_ held).
  void refresh_snapshot();
  void admit(std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestChannel>>>& arrived);
  /// Ends every live request; `release`: gives their blocks back (not after a failed step).
  void abort_all(RequestEnd end, const std::string& error, bool release);

  const DeploymentLimits limits_;
  GenerationLoop loop_;
  std::map<int, std::shared_ptr<RequestChannel>> live_;  // engine thread only
  int next_id_ = 0;
  bool failed_ = false;  // the token source threw: the loop is not run again
  TokenSource& source_;
  long steps_by_mode_[3] = {0, 0, 0};

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestChannel>>> arrived_;
  bool accepting_ = true;
  bool stop_now_ = false;  // shutdown: abort what is left and return
  bool busy_ = false;      // requests live or being admitted
  WorkerSnapshot snapshot_;
  std::once_flag joined_;
  std::thread thread_;
};

}  // namespace freezeframe
