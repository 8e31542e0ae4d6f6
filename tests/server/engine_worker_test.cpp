// server/: the engine thread, fed from many threads at once over a token source that needs no
// GPU: every request gets the tokens it would get alone, cancelled requests end and free their
// blocks, a shutdown finishes or aborts what runs.

#include "freezeframe/server/engine_worker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "freezeframe/serving/hash_token_source.h"

namespace freezeframe {
namespace {

using namespace std::chrono_literals;

DeploymentLimits limits(std::int32_t blocks = 256) {
  DeploymentLimits l;
  l.max_num_seqs = 8;
  l.max_num_batched_tokens = 64;
  l.max_model_len = 512;
  l.block_size = 16;
  l.num_blocks = blocks;
  l.vocab_size = 1000;
  return l;
}

std::vector<std::int32_t> vocabulary() {
  std::vector<std::int32_t> v(1000);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

GenerationRequest request(int i, std::int32_t max_tokens) {
  GenerationRequest r;
  r.prompt.assign(static_cast<std::size_t>(5 + i % 40), 0);
  for (std::size_t p = 0; p < r.prompt.size(); ++p) r.prompt[p] = (i * 31 + int(p)) % 1000;
  r.max_tokens = max_tokens;
  r.sampling = {1.0f, 0, 1.0f, static_cast<std::uint64_t>(i)};
  return r;
}

/// Whether `done` holds within two seconds (the worker updates its snapshot between steps).
template <typename Done>
bool eventually(Done done) {
  for (int i = 0; i < 200 && !done(); ++i) std::this_thread::sleep_for(10ms);
  return done();
}

/// Everything a channel sends until it ends.
std::pair<std::vector<std::int32_t>, RequestEnd> drain(RequestChannel& c) {
  std::vector<std::int32_t> tokens;
  for (;;) {
    RequestChannel::Batch b = c.take(5000ms);
    tokens.insert(tokens.end(), b.tokens.begin(), b.tokens.end());
    if (b.end) return {tokens, *b.end};
  }
}

/// The tokens of `r` run alone through a loop of its own.
std::vector<std::int32_t> alone(const GenerationRequest& r) {
  HashTokenSource source(vocabulary());
  GenerationLoop loop(limits(), source);
  loop.add(r);
  std::vector<std::int32_t> out;
  while (const auto* events = loop.step()) {
    out.insert(out.end(), events->tokens.begin(), events->tokens.end());
  }
  return out;
}

TEST(EngineWorker, ManyThreadsEachGetTheirOwnTokens) {
  HashTokenSource source(vocabulary(), 200);
  EngineWorker worker(limits(), source);
  constexpr int kThreads = 24;
  std::vector<std::vector<std::int32_t>> got(kThreads);
  std::vector<RequestEnd> ends(kThreads);
  std::vector<std::thread> clients;
  for (int i = 0; i < kThreads; ++i) {
    clients.emplace_back([&, i] {
      auto channel = worker.submit(request(i, 10 + i));
      std::tie(got[i], ends[i]) = drain(*channel);
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < kThreads; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(ends[i], RequestEnd::kLength);
    EXPECT_EQ(got[i], alone(request(i, 10 + i)));
  }
  EXPECT_TRUE(eventually([&] {
    const WorkerSnapshot s = worker.snapshot();
    return s.blocks_free == s.blocks_total && s.running + s.waiting == 0;
  })) << "every block back in the pool";
}

TEST(EngineWorker, ACancelledRequestEndsAndFreesItsBlocks) {
  HashTokenSource source(vocabulary(), 500);
  EngineWorker worker(limits(), source);
  auto channel = worker.submit(request(1, 400));
  RequestChannel::Batch first = channel->take(5000ms);
  while (first.tokens.empty() && !first.end) first = channel->take(5000ms);
  EXPECT_FALSE(worker.snapshot().blocks_free == worker.snapshot().blocks_total);
  channel->cancel();
  EXPECT_EQ(drain(*channel).second, RequestEnd::kAbort);
  EXPECT_TRUE(eventually([&] {
    const WorkerSnapshot s = worker.snapshot();
    return s.blocks_free == s.blocks_total;
  }));
}

TEST(EngineWorker, RefusedRequestsEndWithTheReason) {
  HashTokenSource source(vocabulary());
  EngineWorker worker(limits(/*blocks=*/2), source);
  auto channel = worker.submit(request(3, 200));  // needs more than two blocks
  RequestChannel::Batch b = channel->take(5000ms);
  ASSERT_TRUE(b.end);
  EXPECT_EQ(*b.end, RequestEnd::kError);
  EXPECT_NE(b.error.find("larger than the whole KV cache"), std::string::npos) << b.error;
}

TEST(EngineWorker, ShutdownFinishesWhatRunsThenRefuses) {
  HashTokenSource source(vocabulary(), 200);
  EngineWorker worker(limits(), source);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 6; ++i) channels.push_back(worker.submit(request(i, 20)));
  worker.shutdown(/*finish=*/true);
  for (auto& c : channels) EXPECT_EQ(drain(*c).second, RequestEnd::kLength);
  EXPECT_FALSE(worker.snapshot().accepting);
  EXPECT_EQ(drain(*worker.submit(request(9, 5))).second, RequestEnd::kAbort);
}

TEST(EngineWorker, ShutdownWithoutFinishingAbortsWhatRuns) {
  HashTokenSource source(vocabulary(), 2000);
  EngineWorker worker(limits(), source);
  auto channel = worker.submit(request(2, 400));
  (void)channel->take(1000ms);
  worker.shutdown(/*finish=*/false);
  EXPECT_EQ(drain(*channel).second, RequestEnd::kAbort);
}

// A source that says how its steps ran: the worker counts them by mode.
class FullGraphSource final : public TokenSource {
 public:
  FullGraphSource() : hash_(vocabulary()) {}
  std::span<const std::int32_t> run(const StepBatch& step) override { return hash_.run(step); }
  [[nodiscard]] std::optional<RuntimeMode> last_mode() const override { return RuntimeMode::kFull; }

 private:
  HashTokenSource hash_;
};

TEST(EngineWorker, CountsStepsByMode) {
  FullGraphSource source;
  EngineWorker worker(limits(), source);
  auto channel = worker.submit(request(4, 6));
  EXPECT_EQ(drain(*channel).second, RequestEnd::kLength);
  EXPECT_TRUE(eventually([&] {
    const WorkerSnapshot s = worker.snapshot();
    return s.steps > 0 && s.steps_by_mode[static_cast<int>(RuntimeMode::kFull)] == s.steps;
  }));
  EXPECT_EQ(worker.snapshot().steps_by_mode[static_cast<int>(RuntimeMode::kEager)], 0);
}

// A source that fails: every request ends with the reason and /health would say it.
class FailingSource final : public TokenSource {
 public:
  std::span<const std::int32_t> run(const StepBatch&) override {
    throw std::runtime_error("device lost");
  }
};

TEST(EngineWorker, AnEngineThatFailsEndsEveryRequestAndSaysWhy) {
  FailingSource source;
  EngineWorker worker(limits(), source);
  auto channel = worker.submit(request(0, 5));
  const RequestChannel::Batch b = channel->take(5000ms);
  ASSERT_TRUE(b.end);
  EXPECT_EQ(*b.end, RequestEnd::kError);
  EXPECT_NE(b.error.find("device lost"), std::string::npos);
  EXPECT_NE(worker.snapshot().failure.find("device lost"), std::string::npos);
  EXPECT_FALSE(worker.snapshot().accepting);
}

}  // namespace
}  // namespace freezeframe
