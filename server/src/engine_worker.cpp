#include "freezeframe/server/engine_worker.h"

#include <exception>

namespace freezeframe {

RequestChannel::Batch RequestChannel::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !pending_.tokens.empty() || pending_.end; });
  Batch out = std::move(pending_);
  pending_ = Batch{};
  return out;
}

void RequestChannel::post(std::int32_t token) {
  {
    std::lock_guard lock(mutex_);
    pending_.tokens.push_back(token);
  }
  ready_.notify_all();
}

void RequestChannel::close(RequestEnd end, std::string error) {
  {
    std::lock_guard lock(mutex_);
    pending_.end = end;
    pending_.error = std::move(error);
  }
  ready_.notify_all();
}

EngineWorker::EngineWorker(const DeploymentLimits& limits, TokenSource& source, bool prefix_caching)
    : limits_(limits), loop_(limits, source, prefix_caching), source_(source) {
  snapshot_.blocks_total = loop_.pool().num_blocks();
  snapshot_.blocks_free = loop_.batcher().prefix_cache().num_free();
  thread_ = std::thread([this] { run(); });
}

EngineWorker::~EngineWorker() { shutdown(false); }

std::shared_ptr<RequestChannel> EngineWorker::submit(GenerationRequest request) {
  auto channel = std::make_shared<RequestChannel>();
  {
    std::lock_guard lock(mutex_);
    if (!accepting_) {
      channel->close(RequestEnd::kAbort, "the server is shutting down");
      return channel;
    }
    arrived_.emplace_back(std::move(request), channel);
  }
  wake_.notify_all();
  return channel;
}

void EngineWorker::shutdown(bool finish, std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    snapshot_.accepting = false;
    if (!finish) stop_now_ = true;
  }
  wake_.notify_all();
  if (finish) {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    std::unique_lock lock(mutex_);
    wake_.wait_until(lock, deadline, [&] { return !busy_ && arrived_.empty(); });
    stop_now_ = true;
  }
  wake_.notify_all();
  std::call_once(joined_, [&] { thread_.join(); });
}

WorkerSnapshot EngineWorker::snapshot() const {
  std::lock_guard lock(mutex_);
  return snapshot_;
}

void EngineWorker::admit(
    std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestChannel>>>& arrived) {
  for (auto& [request, channel] : arrived) {
    const int id = next_id_++;
    request.id = id;
    Admission admission = Admission::kQueued;
    try {
      admission = loop_.add(std::move(request));
    } catch (const std::exception& e) {
      channel->close(RequestEnd::kError, e.what());
      continue;
    }
    if (admission == Admission::kPromptTooLong || admission == Admission::kCacheTooSmall) {
      channel->close(RequestEnd::kError, std::string(to_string(admission)));
      continue;
    }
    live_[id] = std::move(channel);
  }
  arrived.clear();
}

void EngineWorker::abort_all(RequestEnd end, const std::string& error, bool release) {
  for (auto& [id, channel] : live_) {
    if (release) loop_.abort(id);
    channel->close(end, error);
  }
  live_.clear();
}

void EngineWorker::refresh_snapshot() {
  snapshot_.running = loop_.batcher().num_running();
  snapshot_.waiting = loop_.batcher().num_waiting();
  const PrefixCache& cache = loop_.batcher().prefix_cache();
  snapshot_.blocks_free = cache.num_free();
  snapshot_.blocks_cached = cache.num_cached();
  snapshot_.prefix_queried_tokens = cache.queried_tokens();
  snapshot_.prefix_hit_tokens = cache.hit_tokens();
  snapshot_.steps = loop_.steps();
  snapshot_.preemptions = loop_.batcher().num_preemptions();
  for (int m = 0; m < 3; ++m) snapshot_.steps_by_mode[m] = steps_by_mode_[m];
}

void EngineWorker::run() {
  std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestChannel>>> arrived;
  for (;;) {
    bool stop_now = false;
    {
      std::unique_lock lock(mutex_);
      refresh_snapshot();
      busy_ = !live_.empty();
      wake_.notify_all();  // a shutdown waiting for the requests to end
      wake_.wait(lock, [&] { return !arrived_.empty() || !live_.empty() || stop_now_; });
      if (failed_) {
        for (auto& [request, channel] : arrived_)
          channel->close(RequestEnd::kError, snapshot_.failure);
        arrived_.clear();
        if (!stop_now_) continue;
      }
      arrived.swap(arrived_);
      busy_ = busy_ || !arrived.empty();
      stop_now = stop_now_;
    }
    admit(arrived);
    if (stop_now) {
      abort_all(RequestEnd::kAbort, "the server is shutting down", /*release=*/true);
      break;
    }
    for (auto it = live_.begin(); it != live_.end();) {
      if (it->second->cancelled()) {
        loop_.abort(it->first);
        it->second->close(RequestEnd::kAbort);
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
    if (live_.empty()) continue;
    const ContinuousBatcher::StepEvents* events = nullptr;
    try {
      events = loop_.step();
    } catch (const std::exception& e) {
      // The engine cannot go on: every request ends, and /health says why from now on. The
      // loop stopped inside its step, so nothing more is asked of it.
      const std::string why = std::string("the engine failed: ") + e.what();
      {
        std::lock_guard lock(mutex_);
        snapshot_.failure = why;
        accepting_ = false;
        snapshot_.accepting = false;
      }
      failed_ = true;
      abort_all(RequestEnd::kError, why, /*release=*/false);
      continue;
    }
    if (events == nullptr) {
      // Requests wait that none can run (blocks held by none): cannot happen with a valid
      // plan; do not spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (const std::optional<RuntimeMode> mode = source_.last_mode()) {
      ++steps_by_mode_[static_cast<int>(*mode)];
    }
    {
      // Before any token of this step is posted: a client that has seen a token sees a
      // snapshot at least as new as the step that drew it.
      std::lock_guard lock(mutex_);
      refresh_snapshot();
    }
    for (std::size_t i = 0; i < events->produced.size(); ++i) {
      if (auto it = live_.find(events->produced[i]); it != live_.end()) {
        it->second->post(events->tokens[i]);
      }
    }
    for (std::size_t i = 0; i < events->finished.size(); ++i) {
      if (auto it = live_.find(events->finished[i]); it != live_.end()) {
        it->second->close(events->reasons[i] == FinishReason::kStop ? RequestEnd::kStop
                                                                    : RequestEnd::kLength);
        live_.erase(it);
      }
    }
  }
}

}  // namespace freezeframe
