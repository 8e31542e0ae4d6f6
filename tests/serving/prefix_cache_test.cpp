// serving/: automatic prefix caching. The cache's own rules (hash chains, references, least
// recently used eviction, collisions never a hit), then the generation loop over the engine's
// stand-in with and without it: the same outputs, fewer tokens computed by exactly the tokens
// found cached, every reference back to zero and every block free at the end.

#include "freezeframe/serving/prefix_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "freezeframe/base/error.h"
#include "serving/fake_model.h"

namespace freezeframe {
namespace {

using serving_testing::FakeModel;
using serving_testing::kEos;
using serving_testing::kVocab;

std::vector<std::int32_t> iota(std::int32_t from, std::int32_t n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(PrefixCache, ASequenceLeftBehindIsFoundByItsPrefix) {
  BlockPool pool(8);
  PrefixCache cache(pool, 4, true);
  const std::vector<std::int32_t> a = iota(100, 12);  // three blocks
  std::vector<std::int32_t> blocks;
  cache.allocate(3, blocks);
  PrefixCache::Chain chain;
  cache.commit(blocks, a, 0, 3, chain);
  EXPECT_EQ(cache.num_cached(), 3);
  cache.release(blocks);
  EXPECT_EQ(cache.num_free(), 8) << "unheld cached blocks can still be had";
  // The same prefix, and more after it: two whole blocks within 11 tokens.
  std::vector<std::int32_t> b = a;
  b.push_back(7);
  std::vector<std::int32_t> found;
  PrefixCache::Chain b_chain;
  EXPECT_EQ(cache.match(b, 11, found, b_chain), 8);
  EXPECT_EQ(found, (std::vector<std::int32_t>{blocks[0], blocks[1]}));
  EXPECT_EQ(cache.references(blocks[0]), 1);
  EXPECT_EQ(cache.num_free(), 6);
  // Another first token: no block matches, though later blocks hold the same tokens.
  std::vector<std::int32_t> c = a;
  c[0] = 5;
  std::vector<std::int32_t> none;
  EXPECT_EQ(cache.match(c, 12, none, b_chain), 0);
  EXPECT_TRUE(none.empty());
  cache.release(found);
  EXPECT_EQ(cache.num_free(), 8);
}

TEST(PrefixCache, SharedBlocksAreCountedAndEvictedLeastRecentlyUsedFirst) {
  BlockPool pool(4);
  PrefixCache cache(pool, 2, true);
  std::vector<std::int32_t> x, y;
  PrefixCache::Chain cx, cy;
  cache.allocate(2, x);
  cache.commit(x, iota(0, 4), 0, 2, cx);
  cache.allocate(2, y);
  cache.commit(y, iota(50, 4), 0, 2, cy);
  // x's prefix is held twice more (two requests share it), y's not at all.
  std::vector<std::int32_t> x2, x3;
  PrefixCache::Chain chain;
  EXPECT_EQ(cache.match(iota(0, 4), 4, x2, chain), 4);
  EXPECT_EQ(cache.match(iota(0, 4), 4, x3, chain), 4);
  EXPECT_EQ(cache.references(x[0]), 3);
  cache.release(y);  // y's blocks unheld first ...
  cache.release(x);
  cache.release(x2);  // ... then x's still held by x3
  EXPECT_EQ(cache.num_free(), 2);
  cache.release(x3);  // x unheld last: y's go first
  std::vector<std::int32_t> fresh;
  cache.allocate(2, fresh);
  EXPECT_EQ(fresh, (std::vector<std::int32_t>{y[1], y[0]}))
      << "the least recently used blocks leave the cache first, a sequence's tail before its head";
  EXPECT_EQ(cache.num_cached(), 2);
  std::vector<std::int32_t> again;
  EXPECT_EQ(cache.match(iota(50, 4), 4, again, chain), 0) << "y's prefix is gone";
  EXPECT_EQ(cache.match(iota(0, 4), 4, again, chain), 4) << "x's is still there";
  EXPECT_THROW(cache.allocate(1, again), Error) << "nothing left: every block is held";
  cache.release(again);
  cache.release(fresh);
  EXPECT_EQ(cache.num_free(), 4);
  EXPECT_THROW(cache.release(fresh), Error) << "released twice";
}

// A sequence's tail leaves the cache before its head: its head still matches (a match walks the
// chain from the start, so a lost head would strand every block after it).
TEST(PrefixCache, ATailIsEvictedBeforeItsHead) {
  BlockPool pool(3);
  PrefixCache cache(pool, 2, true);
  std::vector<std::int32_t> seq;
  PrefixCache::Chain chain;
  cache.allocate(3, seq);
  cache.commit(seq, iota(10, 6), 0, 3, chain);
  cache.release(seq);
  std::vector<std::int32_t> one;
  cache.allocate(1, one);
  EXPECT_EQ(one, std::vector<std::int32_t>{seq[2]});
  std::vector<std::int32_t> found;
  EXPECT_EQ(cache.match(iota(10, 6), 6, found, chain), 4) << "the first two blocks still match";
  cache.release(found);
  cache.release(one);
}

// Two sequences with one prefix, computed side by side (neither found the other's blocks): the
// second's prefix blocks stay uncached, the first's stand for them, and the second's own tail
// is recorded after them, so its next turn finds all of it.
TEST(PrefixCache, ATailComputedBesideASharedPrefixIsFoundThroughIt) {
  BlockPool pool(8);
  PrefixCache cache(pool, 2, true);
  std::vector<std::int32_t> a_tokens = iota(0, 6), b_tokens = iota(0, 4);
  b_tokens.push_back(40);
  b_tokens.push_back(41);
  std::vector<std::int32_t> a, b;
  cache.allocate(3, a);
  cache.allocate(3, b);
  PrefixCache::Chain ca, cb;
  cache.commit(a, a_tokens, 0, 3, ca);
  cache.commit(b, b_tokens, 0, 3, cb);
  EXPECT_EQ(cache.num_cached(), 4) << "a's three, and b's own last block";
  std::vector<std::int32_t> found;
  PrefixCache::Chain chain;
  std::vector<std::int32_t> next_turn = b_tokens;
  next_turn.push_back(7);
  EXPECT_EQ(cache.match(next_turn, 7, found, chain), 6);
  EXPECT_EQ(found, (std::vector<std::int32_t>{a[0], a[1], b[2]}));
  cache.release(found);
  cache.release(a);
  cache.release(b);
  EXPECT_EQ(cache.num_free(), 8);
}

// A block evicted and taken by other tokens breaks the chains that ran through it: what was
// recorded after it is no longer found through it.
TEST(PrefixCache, AnEvictedParentIsNotFollowed) {
  BlockPool pool(3);
  PrefixCache cache(pool, 2, true);
  std::vector<std::int32_t> seq;
  PrefixCache::Chain chain;
  cache.allocate(3, seq);
  cache.commit(seq, iota(0, 6), 0, 3, chain);
  cache.release(seq);  // evictable: seq[2], seq[1], seq[0] (tail first)
  std::vector<std::int32_t> taken;
  cache.allocate(3, taken);  // every block leaves the cache
  PrefixCache::Chain other;
  cache.commit(taken, iota(100, 6), 0, 3, other);
  std::vector<std::int32_t> found;
  EXPECT_EQ(cache.match(iota(0, 6), 6, found, chain), 0);
  EXPECT_EQ(cache.match(iota(100, 6), 6, found, chain), 6);
  cache.release(found);
  cache.release(taken);
}

TEST(PrefixCache, DisabledItIsThePool) {
  BlockPool pool(4);
  PrefixCache cache(pool, 2, false);
  std::vector<std::int32_t> blocks;
  PrefixCache::Chain chain;
  cache.allocate(2, blocks);
  cache.commit(blocks, iota(0, 4), 0, 2, chain);
  cache.release(blocks);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(cache.num_cached(), 0);
  std::vector<std::int32_t> found;
  EXPECT_EQ(cache.match(iota(0, 4), 4, found, chain), 0);
}

/// Requests that share prefixes: a few system prompts, some conversations growing turn by
/// turn, the rest unrelated.
std::vector<GenerationRequest> stream(std::mt19937& rng, int count) {
  std::vector<std::vector<std::int32_t>> systems(3);
  for (auto& s : systems) {
    s.resize(20 + rng() % 40);
    for (auto& t : s) t = static_cast<std::int32_t>(rng() % (kVocab - 1));
  }
  std::vector<GenerationRequest> out;
  for (int i = 0; i < count; ++i) {
    GenerationRequest g;
    g.id = i;
    if (rng() % 4 != 0) g.prompt = systems[rng() % systems.size()];
    if (i > 0 && rng() % 3 == 0) g.prompt = out[rng() % out.size()].prompt;  // a next turn
    const int extra = 1 + static_cast<int>(rng() % 30);
    for (int k = 0; k < extra; ++k)
      g.prompt.push_back(static_cast<std::int32_t>(rng() % (kVocab - 1)));
    if (g.prompt.size() > 200) g.prompt.resize(200);
    g.max_tokens = 1 + static_cast<std::int32_t>(rng() % 24);
    g.stop_token_ids = {kEos};
    g.sampling = {0.8f, 50, 0.95f, 1000 + static_cast<std::uint64_t>(i)};
    out.push_back(std::move(g));
  }
  return out;
}

struct Served {
  std::map<int, std::vector<std::int32_t>> outputs;
  long computed = 0;  // new tokens the steps carried
  std::int64_t hit = 0, queried = 0;
  long preemptions = 0;
};

/// The stream through a loop over `blocks` KV blocks, requests arriving a few per step.
Served serve(const std::vector<GenerationRequest>& requests, std::int32_t blocks, bool caching) {
  const DeploymentLimits l = serving_testing::limits(blocks);
  FakeModel model(l);
  for (const auto& r : requests)
    model.prompt_len[r.sampling.seed] = static_cast<std::int32_t>(r.prompt.size());
  GenerationLoop loop(l, model, caching);
  Served run;
  std::size_t next = 0;
  for (int guard = 0; guard < 100000 && (next < requests.size() || !loop.idle()); ++guard) {
    for (int k = 0; k < 2 && next < requests.size(); ++k) {
      EXPECT_EQ(loop.add(requests[next++]), Admission::kQueued);
    }
    const ContinuousBatcher::StepEvents* events = loop.step();
    if (events == nullptr) continue;
    for (std::size_t i = 0; i < events->produced.size(); ++i) {
      run.outputs[events->produced[i]].push_back(events->tokens[i]);
    }
  }
  EXPECT_TRUE(loop.idle());
  const PrefixCache& cache = loop.batcher().prefix_cache();
  EXPECT_EQ(cache.num_free(), blocks) << "every block free or cached, none held";
  for (std::int32_t b = 0; b < blocks; ++b) EXPECT_EQ(cache.references(b), 0) << "block " << b;
  run.computed = model.fed_tokens;
  run.hit = cache.hit_tokens();
  run.queried = cache.queried_tokens();
  run.preemptions = loop.batcher().num_preemptions();
  return run;
}

TEST(PrefixCaching, SameOutputsFewerTokensComputed) {
  for (const unsigned seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const std::vector<GenerationRequest> requests = stream(rng, 60);
    const Served plain = serve(requests, 256, false);
    const Served cached = serve(requests, 256, true);
    EXPECT_EQ(cached.outputs, plain.outputs) << "the cache changes no token";
    ASSERT_EQ(plain.preemptions + cached.preemptions, 0) << "room for all: no recompute";
    EXPECT_GT(cached.hit, 0);
    EXPECT_LE(cached.hit, cached.queried);
    // Cached and computed tokens make up every prompt: the steps carried exactly the hits
    // fewer.
    EXPECT_EQ(cached.computed, plain.computed - cached.hit);
  }
}

// A prompt of whole blocks, all cached: its last token is computed again (its logits draw the
// first output), so the repeat computes one token of its prompt and draws the same outputs.
TEST(PrefixCaching, APromptAllCachedStillComputesItsLastToken) {
  std::mt19937 rng(9);
  GenerationRequest first = serving_testing::request(0, 32, 6, 77, rng);  // two whole blocks
  GenerationRequest again = first;
  again.id = 1;
  const DeploymentLimits l = serving_testing::limits(32);
  FakeModel model(l);
  model.prompt_len[77] = 32;
  GenerationLoop loop(l, model, true);
  ASSERT_EQ(loop.add(first), Admission::kQueued);
  std::map<int, std::vector<std::int32_t>> outputs;
  while (const auto* e = loop.step()) {
    for (std::size_t i = 0; i < e->produced.size(); ++i)
      outputs[e->produced[i]].push_back(e->tokens[i]);
  }
  const long fed = model.fed_tokens;
  ASSERT_EQ(loop.add(again), Admission::kQueued);
  while (const auto* e = loop.step()) {
    for (std::size_t i = 0; i < e->produced.size(); ++i)
      outputs[e->produced[i]].push_back(e->tokens[i]);
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_EQ(loop.batcher().prefix_cache().hit_tokens(), 16) << "the first block, not the last";
  EXPECT_EQ(model.fed_tokens - fed, fed - 16) << "all but the cached block computed again";
}

TEST(PrefixCaching, UnderPreemptionTheOutputsStayTheSame) {
  for (const unsigned seed : {4u, 5u}) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const std::vector<GenerationRequest> requests = stream(rng, 60);
    const Served plain = serve(requests, 16, false);
    const Served cached = serve(requests, 16, true);
    EXPECT_GT(plain.preemptions + cached.preemptions, 0) << "a cache small enough to preempt";
    EXPECT_EQ(cached.outputs, plain.outputs);
    EXPECT_GT(cached.hit, 0);
  }
}

TEST(PrefixCaching, RefusedUnderDecodeContextParallelism) {
  BlockPool pool(16);
  const DeploymentLimits l = serving_testing::limits(16);
  try {
    ContinuousBatcher batcher(l, pool, DcpSharding{2, 1, l.block_size}, true);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(e.message().find("decode context parallelism"), std::string::npos);
  }
}

}  // namespace
}  // namespace freezeframe
