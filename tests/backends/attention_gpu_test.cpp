// The reference and paged_decode backends on the GPU against the double-precision host
// reference: random inputs, poisoned outputs, permuted block tables, mixed decode/prefill
// batches, every attention type and feature, bf16/f16/fp8 caches (the replay of a captured
// forward, cross-attention across steps and refused calls: attention_replay_gpu_test.cpp).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "backends/attention_cases.h"
#include "freezeframe/backends/host_reference.h"
#include "freezeframe/backends/metadata_builder.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/backends/synthetic_batch.h"
#include "freezeframe/base/error.h"
#include "freezeframe/core/cuda_handles.h"
#include "prefill/sm90/prefill_sm90_launch.h"
#include "support/device_tensor.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

using attention_testing::attention_cases;
using attention_testing::Case;
using testing::download;
using testing::relative_l2;
using testing::to_doubles;
using testing::upload;
using testing::worst_row_relative_l2;

/// Sets an environment variable (when `value` is given) for its lifetime.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name), set_(value != nullptr) {
    if (set_) setenv(name, value, 1);
  }
  ~ScopedEnvironment() {
    if (set_) unsetenv(name_);
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  const char* name_;
  bool set_;
};

/// A view of a cache in the backend's layout, or head-major when the case asks for it.
TensorView cache_view(const Case& c, int num_blocks, Device device, void* data) {
  if (!c.head_major_cache) {
    return kv_cache_view(find_backend(c.backend), data, device, num_blocks, c.block_size,
                         c.kv_heads, c.head_size, c.cache_dtype);
  }
  const std::int64_t d = c.head_size, bs = c.block_size, h = c.kv_heads;
  const std::int64_t shape[] = {2, num_blocks, bs, h, d};
  const std::int64_t strides[] = {num_blocks * h * bs * d, h * bs * d, d, bs * d, 1};
  return TensorView::strided(data, c.cache_dtype, shape, strides, device);
}

class ReferenceAttention : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceAttention, MatchesHostReference) {
  FF_REQUIRE_GPU();
  const Case& c = GetParam();
  std::mt19937 rng(1234);
  const bool cached = uses_kv_cache(c.type);
  const bool fp8 = is_fp8(c.cache_dtype);

  AttentionParams params;
  params.num_heads = c.heads;
  params.num_kv_heads = c.kv_heads;
  params.head_size = c.head_size;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
  params.kv_cache_dtype = c.cache_dtype;
  params.sliding_window = c.sliding_window;
  params.logits_soft_cap = c.softcap;
  params.attn_type = c.type;
  if (c.alibi) {
    for (int h = 0; h < c.heads; ++h)
      params.alibi_slopes.push_back(std::exp2(-8.0f * (h + 1) / c.heads));
  }
  if (c.prefill_kernel != nullptr && std::string_view(c.prefill_kernel) == "sm90" &&
      !prefill::sm90_available()) {
    GTEST_SKIP() << "the Hopper prefill kernel needs an sm_90 GPU and a build for sm_90a";
  }
  const AttentionBackend& backend = find_backend(c.backend);
  ScopedEnvironment kernel_choice("FREEZEFRAME_PREFILL_KERNEL", c.prefill_kernel);
  auto impl = backend.make_impl(params);

  SyntheticBatchSpec spec{.decode_seq_lens = c.decodes,
                          .prefills = c.prefills,
                          .block_size = c.block_size,
                          .padding_rows = c.padding_rows,
                          .seed = 99};
  if (!cached) {  // encoder attention: no context, no decodes
    spec.decode_seq_lens.clear();
    for (auto& p : spec.prefills) p.seq_len = p.query_len;
  }
  const SyntheticBatch batch = make_synthetic_batch(spec);
  const int rows = batch.num_tokens;
  const int kv_rows = cached ? static_cast<int>(batch.slot_mapping.size()) : rows;

  // Inputs: queries with std 2 give peaky softmaxes; fp8 keys/values are scaled into e4m3's range.
  const float k_scale = fp8 ? 0.02f : 1.0f, v_scale = fp8 ? 0.03f : 1.0f;
  HostTensor query(c.dtype, {rows, c.heads, c.head_size}),
      key(c.dtype, {kv_rows, c.kv_heads, c.head_size}),
      value(c.dtype, {kv_rows, c.kv_heads, c.head_size});
  testing::fill_normal(query, rng, 2.0f);
  testing::fill_normal(key, rng);
  testing::fill_normal(value, rng);

  HostTensor cache_before(c.cache_dtype,
                          {2, batch.num_blocks, c.block_size, c.kv_heads, c.head_size});
  HostTensor cache_after;
  const auto ctx = static_cast<std::int64_t>(batch.context_slot_mapping.size());
  HostTensor ctx_key(c.dtype, {ctx, c.kv_heads, c.head_size}),
      ctx_value(c.dtype, {ctx, c.kv_heads, c.head_size});
  if (cached) {
    // Unused slots hold garbage that must never be read; the context goes in by the host write.
    std::uniform_int_distribution<int> byte(0, 255);
    for (std::size_t i = 0; i < cache_before.bytes(); ++i)
      cache_before.data()[i] = static_cast<std::uint8_t>(byte(rng) & 0x3F);
    if (ctx > 0) {
      testing::fill_normal(ctx_key, rng);
      testing::fill_normal(ctx_value, rng);
      host_reference::reshape_and_cache(
          ctx_key.view(), ctx_value.view(),
          cache_view(c, batch.num_blocks, Device::cpu(), cache_before.data()),
          batch.context_slot_mapping, k_scale, v_scale);
    }
    cache_after = cache_before;
    host_reference::reshape_and_cache(
        key.view(), value.view(),
        cache_view(c, batch.num_blocks, Device::cpu(), cache_after.data()), batch.slot_mapping,
        k_scale, v_scale);
  }
  const CommonAttentionMetadata common = batch.metadata();
  const auto expected = host_reference::attention(
      params, query.view(), key.view(), value.view(),
      cached ? cache_view(c, batch.num_blocks, Device::cpu(), cache_after.data()) : TensorView(),
      common, k_scale, v_scale);

  // Device side, outputs poisoned (all-ones bytes are NaN in f16, bf16 and f32).
  Stream stream = Stream::create();
  auto builder = backend.make_builder(batch.limits(), nullptr);
  auto q = upload(query), k = upload(key), v = upload(value);
  auto kv = upload(cache_before);
  const TensorView kv_view =
      cached ? cache_view(c, batch.num_blocks, Device::cuda(), kv.buffer.data()) : TensorView();
  HostTensor out_host(c.dtype, {rows, c.heads * c.head_size}),
      lse_host(DType::kF32, {rows, c.heads});
  out_host.fill_bytes(0xFF);
  lse_host.fill_bytes(0xFF);
  auto out = upload(out_host);
  auto lse = upload(lse_host);

  DeviceBuffer workspace(impl->workspace_bytes(batch.limits()));
  AttentionLayer layer;
  layer.name = "layers.0.attn";
  layer.k_scale = k_scale;
  layer.v_scale = v_scale;
  layer.workspace = TensorView(workspace.data(), DType::kU8,
                               {static_cast<std::int64_t>(workspace.bytes())}, Device::cuda());
  const AttentionMetadata& md = builder->build(common, stream.get());
  impl->forward(layer, q.view, k.view, v.view, kv_view, md, out.view, stream.get(), lse.view);
  stream.synchronize();
  download(out.view, out_host);
  download(lse.view, lse_host);

  const std::vector<double> got = to_doubles(out_host);
  const double err = relative_l2(got, expected.out);
  EXPECT_LE(err, c.tolerance) << "relative L2 error of the output";
  // Row by row too (a row is one token's heads): a few wrong rows would hide in the whole
  // output's figure. Three times the whole's bound leaves room for a row's rounding, far below
  // the ~1 of a row computed wrong.
  const std::size_t width = static_cast<std::size_t>(c.heads) * c.head_size;
  const std::size_t real = static_cast<std::size_t>(batch.query_start_loc.back()) * width;
  const double worst_row =
      worst_row_relative_l2(std::span(got).first(real), std::span(expected.out).first(real), width);
  EXPECT_LE(worst_row, 3 * c.tolerance) << "the worst row's relative L2 error";
  for (int r = batch.query_start_loc.back(); r < rows; ++r) {
    for (int i = 0; i < c.heads * c.head_size; ++i) {
      ASSERT_EQ(out_host.get(std::int64_t(r) * c.heads * c.head_size + i), 0.0f)
          << "padding row " << r;
    }
  }
  double lse_err = 0.0;
  for (std::int64_t i = 0; i < lse_host.numel(); ++i) {
    const double got = lse_host.get(i), want = expected.lse_ln[i];
    if (std::isinf(want)) {
      ASSERT_EQ(got, want) << "LSE " << i << " should be -inf";
    } else {
      ASSERT_TRUE(std::isfinite(got)) << "LSE " << i << " unwritten or NaN";
      lse_err = std::max(lse_err, std::abs(got - want) / std::max(1.0, std::abs(want)));
    }
  }
  EXPECT_LE(lse_err, 1e-4) << "largest relative LSE error";

  if (cached) {
    HostTensor cache_gpu = cache_before;
    download(kv.view, cache_gpu);
    std::size_t differing = 0;
    for (std::size_t i = 0; i < cache_gpu.bytes(); ++i)
      differing += cache_gpu.data()[i] != cache_after.data()[i];
    EXPECT_EQ(differing, 0u) << "cache bytes that differ from the host cache write";
  }

  if (fp8) {
    // Against attention over the unquantised keys and values: e4m3 keeps 3 mantissa bits, so
    // each stored element is off by up to 2^-4 relative (≈3.6% RMS); averaged over the keys
    // the output stays within 6e-2.
    HostTensor exact_cache(c.dtype, {2, batch.num_blocks, c.block_size, c.kv_heads, c.head_size});
    exact_cache.fill_bytes(0);
    AttentionParams exact = params;
    exact.kv_cache_dtype = c.dtype;
    if (ctx > 0) {
      host_reference::reshape_and_cache(ctx_key.view(), ctx_value.view(), exact_cache.view(),
                                        batch.context_slot_mapping, 1.0f, 1.0f);
    }
    host_reference::reshape_and_cache(key.view(), value.view(), exact_cache.view(),
                                      batch.slot_mapping, 1.0f, 1.0f);
    const auto unquantised = host_reference::attention(exact, query.view(), {}, {},
                                                       exact_cache.view(), common, 1.0f, 1.0f);
    const double fp8_err = relative_l2(to_doubles(out_host), unquantised.out);
    EXPECT_LE(fp8_err, 6e-2) << "fp8 cache against unquantised attention";
    RecordProperty("fp8_vs_unquantised", std::to_string(fp8_err));
  }
  RecordProperty("relative_l2", std::to_string(err));
  RecordProperty("worst_row_relative_l2", std::to_string(worst_row));
}

INSTANTIATE_TEST_SUITE_P(Cases, ReferenceAttention, ::testing::ValuesIn(attention_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace freezeframe
