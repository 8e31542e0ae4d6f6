// engine/: the sampler's host reference and the arithmetic it shares with the kernel: Philox
// against its published answers, the integer weights against e^x, the order of keys, and the
// draws: greedy ties, top-k and top-p sets, their frequencies, and one token per (seed,
// position).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/runtime/sampler.h"
#include "runtime/sampler_kernel.h"
#include "runtime/sampling_math.h"

namespace freezeframe {
namespace {

namespace s = sampling;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Random123's known-answer vectors for Philox4x32-10 (kat_vectors: zeros, ones, digits of pi).
TEST(SamplingMath, PhiloxMatchesItsKnownAnswers) {
  const s::Philox4 zeros = s::philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zeros.v[0], 0x6627e8d5u);
  EXPECT_EQ(zeros.v[1], 0xe169c58du);
  EXPECT_EQ(zeros.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zeros.v[3], 0x9b00dbd8u);
  const s::Philox4 ones = s::philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
                                           0xffffffffu, 0xffffffffu);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  const s::Philox4 pi = s::philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                                         0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.v[0], 0xd16cfe09u);
  EXPECT_EQ(pi.v[1], 0x94fdccebu);
  EXPECT_EQ(pi.v[2], 0x5001e420u);
  EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

TEST(SamplingMath, MulhiIsTheHighHalfOfTheProduct) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t a = rng(), b = i % 7 == 0 ? ~std::uint64_t(0) : rng();
    __extension__ using U128 = unsigned __int128;
    const auto want = static_cast<std::uint64_t>((static_cast<U128>(a) * b) >> 64);
    ASSERT_EQ(s::mulhi64(a, b), want) << a << " * " << b;
  }
}

TEST(SamplingMath, KeysOrderAsTheValues) {
  std::vector<float> values = {-kInf,  -3e38f, -1.0f, -1e-40f, -0.0f, 0.0f,
                               1e-40f, 0.5f,   1.0f,  3e38f,   kInf};
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int i = 0; i < 1000; ++i) values.push_back(normal(rng));
  for (const float a : values) {
    for (const float b : {values[3], values[7], values[20], values[500]}) {
      const float ca = s::canonical(a), cb = s::canonical(b);
      EXPECT_EQ(ca < cb, s::order_key(ca) < s::order_key(cb)) << a << " vs " << b;
      EXPECT_EQ(ca == cb, s::order_key(ca) == s::order_key(cb)) << a << " vs " << b;
    }
    EXPECT_EQ(s::key_value(s::order_key(s::canonical(a))), s::canonical(a));
  }
  EXPECT_EQ(s::order_key(s::canonical(-0.0f)), s::order_key(0.0f)) << "−0 is +0";
  EXPECT_EQ(s::canonical(std::nanf("")), -kInf) << "NaN is −∞";
  // Equal values: the lower id ranks higher.
  EXPECT_GT(s::rank_key(1.0f, 3), s::rank_key(1.0f, 4));
  EXPECT_GT(s::rank_key(1.5f, 9), s::rank_key(1.0f, 0));
  EXPECT_EQ(s::rank_id(s::rank_key(-2.0f, 151935)), 151935);
}

TEST(SamplingMath, WeightsFollowTheExponential) {
  EXPECT_EQ(s::weight(3.0f, 3.0f), 0xffffffffu);
  EXPECT_EQ(s::weight(-kInf, 3.0f), 0u);
  EXPECT_EQ(s::weight(3.0f, kInf), 0u);
  EXPECT_EQ(s::weight(kInf, kInf), 0xffffffffu);
  EXPECT_EQ(s::weight(-kInf, -kInf), 0xffffffffu) << "an all −∞ row: every token alike";
  EXPECT_EQ(s::weight(-30.0f, 0.0f), 0u) << "e^-30 · 2^32 < 1";
  std::uint32_t previous = 0xffffffffu;
  for (int i = 0; i <= 250000; ++i) {
    const float gap = static_cast<float>(i) * 1e-4f;  // 0 to 25 nats
    const std::uint32_t w = s::weight(-gap, 0.0f);
    const double exact = std::ldexp(std::exp(-static_cast<double>(gap)), 32);
    ASSERT_LE(std::abs(static_cast<double>(w) - exact), 1.5e-5 * exact + 1.0) << "gap " << gap;
    ASSERT_LE(w, previous) << "weights fall as the gap grows, gap " << gap;
    previous = w;
  }
}

TEST(SamplingMath, NucleusTargetRoundsUp) {
  EXPECT_EQ(s::nucleus_target(1000, 0.5f), 500u);
  EXPECT_EQ(s::nucleus_target(1001, 0.5f), 501u);
  EXPECT_EQ(s::nucleus_target(1000, 1.0f), 1000u);
  EXPECT_EQ(s::nucleus_target(1000, 1e-30f), 1u);
  EXPECT_EQ(s::nucleus_target(std::uint64_t(1) << 50, 0.25f), std::uint64_t(1) << 48);
}

TEST(SamplingMath, DrawBitsDependOnSeedAndPositionOnly) {
  EXPECT_EQ(s::draw_bits(7, 100), s::draw_bits(7, 100));
  std::set<std::uint64_t> seen;
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    for (std::int64_t pos = 0; pos < 50; ++pos) seen.insert(s::draw_bits(seed, pos));
  }
  EXPECT_EQ(seen.size(), 2500u);
}

std::vector<float> normal_row(int vocab, std::uint32_t seed, float stddev = 2.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> row(vocab);
  for (float& x : row) x = normal(rng);
  return row;
}

TEST(Sampler, GreedyTakesTheLargestLogitAndTheLowestIdOfATie) {
  std::vector<float> row = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  const SamplingParams greedy;  // temperature 0
  EXPECT_EQ(sample_reference(row, greedy, 0), 1);
  // Temperature 0 ignores everything else.
  EXPECT_EQ(sample_reference(row, {0.0f, 3, 0.2f, 99}, 17), 1);
  // top_k 1 and a tiny top_p are greedy too, whatever the seed.
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    EXPECT_EQ(sample_reference(row, {1.0f, 1, 1.0f, seed}, 5), 1);
    EXPECT_EQ(sample_reference(row, {0.8f, 0, 1e-6f, seed}, 5), 1);
  }
  // NaN and −∞ lose to anything; −0 ties +0.
  const std::vector<float> odd = {std::nanf(""), -kInf, -0.0f, 0.0f, -5.0f};
  EXPECT_EQ(sample_reference(odd, greedy, 0), 2);
  const std::vector<float> all_nan(4, std::nanf(""));
  EXPECT_EQ(sample_reference(all_nan, greedy, 0), 0);
}

TEST(Sampler, OneTokenPerSeedAndPosition) {
  const std::vector<float> row = normal_row(1000, 3);
  const SamplingParams p{1.0f, 0, 1.0f, 42};
  const std::int32_t a = sample_reference(row, p, 10);
  EXPECT_EQ(sample_reference(row, p, 10), a);
  std::set<std::int32_t> across_positions, across_seeds;
  for (int i = 0; i < 200; ++i) {
    across_positions.insert(sample_reference(row, p, i));
    across_seeds.insert(sample_reference(row, {1.0f, 0, 1.0f, std::uint64_t(i)}, 10));
  }
  EXPECT_GT(across_positions.size(), 20u);
  EXPECT_GT(across_seeds.size(), 20u);
}

TEST(Sampler, TopKKeepsTheKBestWithTiesToLowerIds) {
  // Values with many ties: 3.0 at ids 10, 20, 30, 40; 2.0 at 5 and 6; the rest lower.
  std::vector<float> row(64, -1.0f);
  for (int id : {10, 20, 30, 40}) row[id] = 3.0f;
  row[5] = row[6] = 2.0f;
  // top_k 3 keeps ids 10, 20, 30 (the tie at 3.0 cut by id).
  std::set<std::int32_t> drawn;
  for (int pos = 0; pos < 400; ++pos) drawn.insert(sample_reference(row, {1.0f, 3, 1.0f, 1}, pos));
  EXPECT_EQ(drawn, (std::set<std::int32_t>{10, 20, 30}));
  // top_k 5: the four at 3.0 and id 5.
  drawn.clear();
  for (int pos = 0; pos < 2000; ++pos) drawn.insert(sample_reference(row, {1.0f, 5, 1.0f, 2}, pos));
  EXPECT_EQ(drawn, (std::set<std::int32_t>{5, 10, 20, 30, 40}));
  // top_k past the vocabulary keeps everything.
  drawn.clear();
  for (int pos = 0; pos < 20000; ++pos)
    drawn.insert(sample_reference(row, {2.0f, 1000, 1.0f, 3}, pos));
  EXPECT_EQ(drawn.size(), 64u);
}

// Frequencies over many positions match the filtered softmax, computed here in double.
struct FrequencyCase {
  float temperature;
  int top_k;
  float top_p;
};

class SamplerFrequency : public ::testing::TestWithParam<FrequencyCase> {};

TEST_P(SamplerFrequency, MatchTheFilteredSoftmax) {
  const FrequencyCase c = GetParam();
  const std::vector<float> row = {1.0f, 2.5f, 0.0f, 2.5f, -1.0f, 1.5f, 0.7f, -3.0f};
  const int vocab = static_cast<int>(row.size());
  // The definition in sampler.h, in double: rank, top-k, softmax, nucleus.
  std::vector<int> order(vocab);
  for (int v = 0; v < vocab; ++v) order[v] = v;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
  const int kept = c.top_k > 0 ? std::min(c.top_k, vocab) : vocab;
  std::vector<double> p(vocab, 0.0);
  double total = 0.0;
  for (int i = 0; i < kept; ++i) {
    p[order[i]] = std::exp((row[order[i]] - row[order[0]]) / double(c.temperature));
    total += p[order[i]];
  }
  double mass = 0.0;
  int nucleus = 0;
  while (nucleus < kept && mass < c.top_p * total - 1e-9 * total) mass += p[order[nucleus++]];
  for (int i = nucleus; i < kept; ++i) p[order[i]] = 0.0;
  std::map<std::int32_t, int> counts;
  const int draws = 200000;
  for (int pos = 0; pos < draws; ++pos) {
    ++counts[sample_reference(row, {c.temperature, c.top_k, c.top_p, 1234}, pos)];
  }
  for (int v = 0; v < vocab; ++v) {
    const double expected = p[v] / mass;
    const double got = double(counts[v]) / draws;
    // 5 standard deviations of a binomial frequency, and nothing outside the kept set.
    const double sd = std::sqrt(expected * (1.0 - expected) / draws);
    EXPECT_NEAR(got, expected, 5.0 * sd + 1e-9) << "token " << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SamplerFrequency,
                         ::testing::Values(FrequencyCase{1.0f, 0, 1.0f},
                                           FrequencyCase{0.7f, 0, 1.0f},
                                           FrequencyCase{1.3f, 4, 1.0f},
                                           FrequencyCase{1.0f, 0, 0.8f},
                                           FrequencyCase{0.9f, 6, 0.6f}));

TEST(Sampler, TopPKeepsTheFewestBestReachingIt) {
  // Probabilities at temperature 1: id 0 holds e^0 / (1 + 2e^-ln4) = 2/3 when ids 1 and 2 hold
  // 1/6 each. top_p 0.6 keeps id 0 alone; 0.7 adds id 1 (the tie with 2 cut by id).
  const std::vector<float> row = {0.0f, -std::log(4.0f), -std::log(4.0f)};
  std::set<std::int32_t> drawn;
  for (int pos = 0; pos < 300; ++pos) drawn.insert(sample_reference(row, {1.0f, 0, 0.6f, 9}, pos));
  EXPECT_EQ(drawn, (std::set<std::int32_t>{0}));
  drawn.clear();
  for (int pos = 0; pos < 300; ++pos) drawn.insert(sample_reference(row, {1.0f, 0, 0.7f, 9}, pos));
  EXPECT_EQ(drawn, (std::set<std::int32_t>{0, 1}));
}

TEST(Sampler, RefusesBadParametersNamingTheField) {
  const std::vector<float> row = {1.0f, 2.0f};
  auto message = [&](const SamplingParams& p) {
    try {
      (void)sample_reference(row, p, 0);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({-1.0f, 0, 1.0f, 0}).find("sampling.temperature"), std::string::npos);
  EXPECT_NE(message({kInf, 0, 1.0f, 0}).find("sampling.temperature"), std::string::npos);
  EXPECT_NE(message({1.0f, -2, 1.0f, 0}).find("sampling.top_k: -2 is negative"), std::string::npos);
  EXPECT_NE(message({1.0f, 0, 0.0f, 0}).find("sampling.top_p: 0 is not in (0, 1]"),
            std::string::npos);
  EXPECT_NE(message({1.0f, 0, 1.5f, 0}).find("sampling.top_p"), std::string::npos);
  EXPECT_THROW((void)sample_reference({}, {}, 0), Error);
}

}  // namespace
}  // namespace freezeframe
