// The LSE merge kernel against the host merge: random partial states with empty shards mixed
// in, rows where every shard is empty, and f32 / bf16 / f16 inputs and outputs.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "freezeframe/backends/host_reference.h"
#include "freezeframe/backends/lse_merge.h"
#include "freezeframe/core/cuda_check.h"
#include "support/device_tensor.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

using testing::download;
using testing::relative_l2;
using testing::to_doubles;
using testing::upload;

struct MergeCase {
  const char* name;
  DType in, out;
  int parts, tokens, heads, head_size;
  double tolerance;  // f32: float arithmetic; bf16/f16: output rounding
};

std::ostream& operator<<(std::ostream& os, const MergeCase& c) { return os << c.name; }

class LseMerge : public ::testing::TestWithParam<MergeCase> {};

TEST_P(LseMerge, MatchesHostMerge) {
  FF_REQUIRE_GPU();
  const MergeCase& c = GetParam();
  std::mt19937 rng(8);
  HostTensor partial(c.in, {c.parts, c.tokens, c.heads, c.head_size}),
      lse(DType::kF32, {c.parts, c.tokens, c.heads});
  testing::fill_normal(partial, rng);
  testing::fill_uniform(lse, rng, -20.0f, 20.0f);
  // Empty shards: every third state, and for token 1 every shard of head 0.
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < lse.numel(); i += 3) lse.set(i, -inf);
  for (int r = 0; r < c.parts; ++r) lse.set((std::int64_t(r) * c.tokens + 1) * c.heads + 0, -inf);

  std::vector<double> want_out, want_lse;
  host_reference::merge_attention_states(to_doubles(partial), to_doubles(lse), c.parts, c.tokens,
                                         c.heads, c.head_size, want_out, want_lse);
  HostTensor out(c.out, {c.tokens, c.heads, c.head_size}),
      out_lse(DType::kF32, {c.tokens, c.heads});
  out.fill_bytes(0xFF);
  out_lse.fill_bytes(0xFF);
  auto d_partial = upload(partial), d_lse = upload(lse), d_out = upload(out),
       d_out_lse = upload(out_lse);
  merge_attention_states(d_partial.view, d_lse.view, d_out.view, d_out_lse.view, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  download(d_out.view, out);
  download(d_out_lse.view, out_lse);

  EXPECT_LE(relative_l2(to_doubles(out), want_out), c.tolerance);
  for (std::int64_t i = 0; i < out_lse.numel(); ++i) {
    if (std::isinf(want_lse[i])) {
      ASSERT_EQ(out_lse.get(i), -inf) << i;
    } else {
      ASSERT_NEAR(out_lse.get(i), want_lse[i], 1e-5 * std::max(1.0, std::abs(want_lse[i]))) << i;
    }
  }
  // Token 1, head 0 saw no key anywhere: zeros, never NaN.
  for (int d = 0; d < c.head_size; ++d)
    ASSERT_EQ(out.get(std::int64_t(1) * c.heads * c.head_size + d), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LseMerge,
    ::testing::Values(
        MergeCase{"f32_to_f32_dcp4", DType::kF32, DType::kF32, 4, 33, 8, 128, 1e-6},
        MergeCase{"f32_to_bf16_split16", DType::kF32, DType::kBF16, 16, 7, 32, 128, 1e-2},
        MergeCase{"bf16_to_bf16_dcp2", DType::kBF16, DType::kBF16, 2, 64, 4, 64, 1e-2},
        MergeCase{"f16_to_f16_dcp8_d256", DType::kF16, DType::kF16, 8, 5, 2, 256, 5e-3},
        MergeCase{"f32_single_part", DType::kF32, DType::kF32, 1, 9, 3, 80, 1e-6}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LseMergeErrors, MismatchedShapesAreRejectedBeforeLaunch) {
  FF_REQUIRE_GPU();
  HostTensor partial(DType::kF32, {2, 3, 4, 8}), lse(DType::kF32, {2, 3, 5}),
      out(DType::kF32, {3, 4, 8});
  out.fill_bytes(0xAB);
  auto d_partial = upload(partial), d_lse = upload(lse), d_out = upload(out);
  try {
    merge_attention_states(d_partial.view, d_lse.view, d_out.view, {}, nullptr);
    ADD_FAILURE() << "a mismatched LSE shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("partial_lse_ln"), std::string::npos) << e.message();
  }
  HostTensor after = out;
  download(d_out.view, after);
  EXPECT_EQ(std::memcmp(after.data(), out.data(), out.bytes()), 0);
}

}  // namespace
}  // namespace freezeframe
