// serving/: the generation loop over a stand-in for an engine that samples. Tokens drawn are fed
// back as the next inputs; a request that draws its stop token finishes early and gives its
// blocks back; abort ends one mid-run; and under a KV cache too small for the load, requests
// preempted and recomputed draw the same tokens as with room to spare.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/serving/generation_loop.h"
#include "freezeframe/serving/stop_tokens.h"
#include "serving/fake_model.h"

namespace freezeframe {
namespace {

using serving_testing::FakeModel;
using serving_testing::kEos;
using serving_testing::kVocab;
using serving_testing::limits;
using serving_testing::request;

struct Outcome {
  std::map<int, std::vector<std::int32_t>> outputs;
  std::map<int, FinishReason> reasons;
};

/// Runs the loop until no request is left; `each_step` sees the loop after every step.
template <typename EachStep>
Outcome run(GenerationLoop& loop, EachStep each_step) {
  Outcome o;
  for (int guard = 0; !loop.idle(); ++guard) {
    const ContinuousBatcher::StepEvents* events = loop.step();
    if (events == nullptr || guard > 100000) {
      ADD_FAILURE() << "the loop stopped with requests left";
      break;
    }
    EXPECT_EQ(events->tokens.size(), events->produced.size());
    EXPECT_EQ(events->reasons.size(), events->finished.size());
    for (std::size_t i = 0; i < events->produced.size(); ++i) {
      EXPECT_EQ(o.reasons.count(events->produced[i]), 0u) << "a token after finishing";
      o.outputs[events->produced[i]].push_back(events->tokens[i]);
    }
    for (std::size_t i = 0; i < events->finished.size(); ++i) {
      EXPECT_TRUE(o.reasons.emplace(events->finished[i], events->reasons[i]).second);
    }
    each_step(*events);
  }
  return o;
}
Outcome run(GenerationLoop& loop) {
  return run(loop, [](const ContinuousBatcher::StepEvents&) {});
}

TEST(GenerationLoop, ARequestThatDrawsItsStopTokenFinishesEarlyAndFreesItsBlocks) {
  std::mt19937 rng(1);
  const DeploymentLimits l = limits(64);
  FakeModel model(l);
  GenerationLoop loop(l, model);
  // Request 0 (prompt 40) draws the stop token for its 6th output, at position 45; request 1
  // (prompt 30) never does. Their prefills share the first steps (64 tokens a step).
  model.eos_at.insert({11, 45});
  model.prompt_len = {{11, 40}, {22, 30}};
  ASSERT_EQ(loop.add(request(0, 40, 20, 11, rng)), Admission::kQueued);
  ASSERT_EQ(loop.add(request(1, 30, 12, 22, rng)), Admission::kQueued);
  int produced_1 = 0;
  bool checked = false;
  const Outcome o = run(loop, [&](const ContinuousBatcher::StepEvents& e) {
    produced_1 += static_cast<int>(std::count(e.produced.begin(), e.produced.end(), 1));
    if (std::find(e.finished.begin(), e.finished.end(), 0) == e.finished.end()) return;
    // Request 0's blocks are back: only request 1's, for its tokens computed so far, are out.
    ASSERT_GT(produced_1, 0);
    EXPECT_EQ(loop.pool().num_free(), l.num_blocks - blocks_for(30 + produced_1 - 1, 16));
    EXPECT_EQ(loop.batcher().num_running(), 1);
    checked = true;
  });
  EXPECT_TRUE(checked);
  ASSERT_EQ(o.outputs.at(0).size(), 6u) << "five tokens, then the stop token";
  EXPECT_EQ(o.outputs.at(0).back(), kEos);
  EXPECT_EQ(o.reasons.at(0), FinishReason::kStop);
  ASSERT_EQ(o.outputs.at(1).size(), 12u);
  EXPECT_EQ(o.reasons.at(1), FinishReason::kLength);
  for (const std::int32_t t : o.outputs.at(1)) EXPECT_NE(t, kEos);
  EXPECT_EQ(loop.pool().num_free(), l.num_blocks) << "every block back";

  // Alone, request 0 draws the same tokens: they depend on its sequence, seed and positions.
  std::mt19937 again(1);
  FakeModel alone_model(l);
  alone_model.eos_at.insert({11, 45});
  alone_model.prompt_len = {{11, 40}};
  GenerationLoop alone(l, alone_model);
  ASSERT_EQ(alone.add(request(0, 40, 20, 11, again)), Admission::kQueued);
  EXPECT_EQ(run(alone).outputs.at(0), o.outputs.at(0));
}

TEST(GenerationLoop, AbortEndsARequestMidRunAndFreesItsBlocks) {
  std::mt19937 rng(2);
  const DeploymentLimits l = limits(64);
  FakeModel model(l);
  GenerationLoop loop(l, model);
  for (int id = 0; id < 6; ++id) {
    model.prompt_len[100 + id] = 20 + id;
    ASSERT_EQ(loop.add(request(id, 20 + id, 30, 100 + id, rng)), Admission::kQueued);
  }
  // Four run (max_num_seqs), two wait. After a few steps abort a running and a waiting one.
  std::map<int, std::size_t> early;  // tokens of the first steps
  for (int s = 0; s < 5; ++s) {
    const ContinuousBatcher::StepEvents* e = loop.step();
    ASSERT_NE(e, nullptr);
    for (const int id : e->produced) ++early[id];
  }
  ASSERT_GT(early[1], 0u) << "request 1 is decoding when it is aborted";
  ASSERT_EQ(loop.batcher().num_running(), 4);
  ASSERT_EQ(loop.batcher().num_waiting(), 2);
  const std::int32_t free_before = loop.pool().num_free();
  EXPECT_TRUE(loop.abort(1));
  EXPECT_GT(loop.pool().num_free(), free_before) << "the running request's blocks are back";
  EXPECT_TRUE(loop.abort(5));
  EXPECT_FALSE(loop.abort(5)) << "already gone";
  const Outcome o = run(loop);
  EXPECT_EQ(o.outputs.count(5), 0u) << "never ran";
  EXPECT_EQ(o.outputs.count(1), 0u) << "nothing after the abort";
  EXPECT_EQ(o.reasons.count(1), 0u);
  for (const int id : {0, 2, 3, 4}) {
    EXPECT_EQ(o.reasons.at(id), FinishReason::kLength) << id;
    EXPECT_EQ(early[id] + o.outputs.at(id).size(), 30u) << id;
  }
  EXPECT_EQ(loop.pool().num_free(), l.num_blocks);
  EXPECT_TRUE(loop.idle());
}

// A cache of 20 blocks (320 tokens) for twelve requests of up to 200 tokens each: blocks run
// out, requests are preempted and recomputed from their prompt and outputs so far, and every
// token drawn is the one drawn with 2000 blocks and no preemption.
TEST(GenerationLoop, PreemptedRequestsDrawTheSameTokens) {
  auto outcome = [](std::int32_t blocks, long* preemptions) {
    std::mt19937 rng(3);
    const DeploymentLimits l = limits(blocks);
    FakeModel model(l);
    GenerationLoop loop(l, model);
    for (int id = 0; id < 12; ++id) {
      const int prompt = 20 + static_cast<int>(rng() % 100);
      const int max_tokens = 30 + static_cast<int>(rng() % 70);
      const std::uint64_t seed = 1000 + id;
      model.prompt_len[seed] = prompt;
      // Every third request draws its stop token partway.
      if (id % 3 == 0) model.eos_at.insert({seed, prompt + 10 + id});
      EXPECT_EQ(loop.add(request(id, prompt, max_tokens, seed, rng)), Admission::kQueued);
    }
    Outcome o = run(loop);
    EXPECT_EQ(loop.pool().num_free(), blocks);
    *preemptions = loop.batcher().num_preemptions();
    return o;
  };
  long tight_preemptions = 0, roomy_preemptions = 0;
  const Outcome tight = outcome(20, &tight_preemptions);
  const Outcome roomy = outcome(2000, &roomy_preemptions);
  EXPECT_GT(tight_preemptions, 0) << "the small cache preempts";
  EXPECT_EQ(roomy_preemptions, 0);
  ASSERT_EQ(tight.outputs.size(), 12u);
  for (int id = 0; id < 12; ++id) {
    EXPECT_EQ(tight.outputs.at(id), roomy.outputs.at(id)) << "request " << id;
    EXPECT_EQ(tight.reasons.at(id), roomy.reasons.at(id)) << "request " << id;
    EXPECT_EQ(roomy.reasons.at(id), id % 3 == 0 ? FinishReason::kStop : FinishReason::kLength);
  }
}

TEST(GenerationLoop, TheBatcherStepsCarryTokensAndSamplingParameters) {
  const DeploymentLimits l = limits(64);
  BlockPool pool(64);
  ContinuousBatcher batcher(l, pool);
  GenerationRequest g;
  g.id = 7;
  g.prompt = {5, 6, 7};
  g.max_tokens = 3;
  g.stop_token_ids = {kEos};
  g.sampling = {0.5f, 3, 0.9f, 42};
  ASSERT_EQ(batcher.add(g), Admission::kQueued);
  ASSERT_EQ(batcher.add(8, 2, 2), Admission::kQueued);  // by lengths: derived tokens, greedy
  const StepBatch* step = batcher.schedule();
  ASSERT_NE(step, nullptr);
  // Prefills of 3 and 2 tokens; request 8's tokens are (8 · 7919 + position) mod vocab.
  EXPECT_EQ(std::vector<std::int32_t>(step->token_ids.begin(), step->token_ids.end()),
            (std::vector<std::int32_t>{5, 6, 7, (8 * 7919) % kVocab, (8 * 7919 + 1) % kVocab}));
  ASSERT_EQ(step->sampling.size(), 2u);
  EXPECT_EQ(step->sampling[0], g.sampling);
  EXPECT_EQ(step->sampling[1], SamplingParams{});
  const std::vector<std::int32_t> wrong = {1};
  EXPECT_THROW((void)batcher.complete_step(wrong), Error) << "one token per request";
  const std::vector<std::int32_t> drawn = {123, 456};
  const ContinuousBatcher::StepEvents e = batcher.complete_step(drawn);
  EXPECT_EQ(e.produced, (std::vector<int>{7, 8}));
  EXPECT_EQ(e.tokens, (std::vector<std::int32_t>{123, 456}));
  step = batcher.schedule();
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(std::vector<std::int32_t>(step->token_ids.begin(), step->token_ids.end()),
            (std::vector<std::int32_t>{123, 456}))
      << "the drawn tokens go back in";
  // Request 7 draws its stop token: it finishes by it, request 8 by length.
  const std::vector<std::int32_t> stop = {kEos, 9};
  const ContinuousBatcher::StepEvents f = batcher.complete_step(stop);
  EXPECT_EQ(f.finished, (std::vector<int>{7, 8}));
  EXPECT_EQ(f.reasons, (std::vector<FinishReason>{FinishReason::kStop, FinishReason::kLength}));
  EXPECT_EQ(pool.num_free(), 64);

  // A batcher of requests by lengths only hands out steps without sampling parameters.
  ASSERT_EQ(batcher.add(9, 4, 1), Admission::kQueued);
  step = batcher.schedule();
  ASSERT_NE(step, nullptr);
  EXPECT_TRUE(step->sampling.empty());
  EXPECT_EQ(step->token_ids.size(), 4u);
  (void)batcher.complete_step();
}

TEST(GenerationLoop, RefusesRequestsOutsideTheVocabularyNamingThem) {
  const DeploymentLimits l = limits(64);
  BlockPool pool(64);
  ContinuousBatcher batcher(l, pool);
  auto message = [&](GenerationRequest g) {
    try {
      (void)batcher.add(std::move(g));
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("accepted");
  };
  GenerationRequest g;
  g.id = 3;
  g.max_tokens = 4;
  EXPECT_NE(message(g).find("request 3: needs a prompt"), std::string::npos);
  g.prompt = {1, kVocab};
  EXPECT_NE(message(g).find("request 3: prompt token 1000 is outside the vocabulary of 1000"),
            std::string::npos);
  g.prompt = {1, 2};
  g.stop_token_ids = {-1};
  EXPECT_NE(message(g).find("request 3: stop token -1 is outside"), std::string::npos);
  g.stop_token_ids = {kEos};
  g.sampling.top_p = 2.0f;
  EXPECT_NE(message(g).find("request 3: sampling.top_p"), std::string::npos);
  g.sampling = {};
  g.max_tokens = -1;
  EXPECT_NE(message(g).find("non-negative max_tokens"), std::string::npos);
  g.max_tokens = 400;
  EXPECT_EQ(message(g), "accepted") << "an output past max_model_len is cut, not refused";
}

// The tiny tokenizer's EOS is </s> (2) and its ChatML end of turn <|im_end|> (4); SmolLM2's EOS
// is <|im_end|> itself (2).
TEST(StopTokens, GatherTheConfigsTheTokenizersAndTheChatsEnd) {
  const std::filesystem::path fixtures =
      std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / "tests" / "fixtures" / "tokenizer";
  const Tokenizer tiny = Tokenizer::open((fixtures / "tiny" / "tokenizer.json").string());
  CheckpointConfig config;
  config.eos_token_ids = {0, 2};
  EXPECT_EQ(stop_tokens(config, tiny, false), (std::vector<std::int32_t>{0, 2}));
  EXPECT_EQ(stop_tokens(config, tiny, true), (std::vector<std::int32_t>{0, 2, 4}));
  config.eos_token_ids = {};
  EXPECT_EQ(stop_tokens(config, tiny, false), (std::vector<std::int32_t>{2}));
  const Tokenizer smollm2 = Tokenizer::open((fixtures / "smollm2" / "tokenizer.json").string());
  EXPECT_EQ(stop_tokens(config, smollm2, true), (std::vector<std::int32_t>{2}));
}

}  // namespace
}  // namespace freezeframe
