// Attention on the GPU beyond the case table: cross-attention that writes the encoder's K/V
// once and reads it in later steps, a captured forward replayed after fresh metadata (against
// the double-precision host reference), and refused calls that change nothing.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include "freezeframe/backends/host_reference.h"
#include "freezeframe/backends/metadata_builder.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/backends/synthetic_batch.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "support/device_tensor.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

using testing::download;
using testing::relative_l2;
using testing::to_doubles;
using testing::upload;

// --- cross-attention: encoder K/V written once, then read by later decoder steps ---
TEST(ReferenceCrossAttention, WritesEncoderKvThenAttendsWithoutNewKv) {
  FF_REQUIRE_GPU();
  std::mt19937 rng(5);
  AttentionParams params;
  params.num_heads = 8;
  params.num_kv_heads = 4;
  params.head_size = 64;
  params.scale = 0.125f;
  params.kv_cache_dtype = DType::kBF16;
  params.attn_type = AttentionType::kEncoderDecoder;
  const AttentionBackend& backend = find_backend("reference");
  auto impl = backend.make_impl(params);

  // Encoder lengths 20, 33, 7; decoder queries 1, 1 and 3 tokens (two "decodes" first).
  SyntheticBatch enc =
      make_synthetic_batch({.prefills = {{20, 20}, {33, 33}, {7, 7}}, .block_size = 16, .seed = 3});
  const std::vector<std::int32_t> decoder_qsl = {0, 1, 2, 5};
  CommonAttentionMetadata step = enc.metadata();
  step.query_start_loc = decoder_qsl;
  step.num_tokens = 5;
  step.num_decodes = 2;
  BatchLimits limits = enc.limits();

  const int rows = 5, enc_rows = static_cast<int>(enc.slot_mapping.size());
  HostTensor query(DType::kBF16, {rows, 8, 64}), key(DType::kBF16, {enc_rows, 4, 64}),
      value(DType::kBF16, {enc_rows, 4, 64});
  testing::fill_normal(query, rng, 2.0f);
  testing::fill_normal(key, rng);
  testing::fill_normal(value, rng);
  HostTensor cache(DType::kBF16, {2, enc.num_blocks, 16, 4, 64});
  cache.fill_bytes(0x3C);
  HostTensor cache_host = cache;
  host_reference::reshape_and_cache(key.view(), value.view(), cache_host.view(), enc.slot_mapping,
                                    1.0f, 1.0f);
  const auto expected =
      host_reference::attention(params, query.view(), {}, {}, cache_host.view(), step, 1.0f, 1.0f);

  Stream stream = Stream::create();
  auto builder = backend.make_builder(limits, nullptr);
  auto q = upload(query), k = upload(key), v = upload(value), kv = upload(cache);
  HostTensor out_host(DType::kBF16, {rows, 8, 64});
  AttentionLayer layer;
  for (int pass = 0; pass < 2; ++pass) {
    CommonAttentionMetadata s = step;
    if (pass == 1) s.slot_mapping = {};  // later steps bring no encoder K/V
    out_host.fill_bytes(0xFF);
    auto out = upload(out_host);
    const AttentionMetadata& md = builder->build(s, stream.get());
    impl->forward(layer, q.view, pass == 0 ? k.view : TensorView(),
                  pass == 0 ? v.view : TensorView(), kv.view, md, out.view, stream.get());
    stream.synchronize();
    download(out.view, out_host);
    EXPECT_LE(relative_l2(to_doubles(out_host), expected.out), 1e-2) << "pass " << pass;
  }
}

// --- graph capture: the captured forward replays correctly after the metadata changes ---
class AttentionGraph : public ::testing::TestWithParam<const char*> {};

TEST_P(AttentionGraph, ReplayAfterNewMetadataMatchesHostReference) {
  FF_REQUIRE_GPU();
  AttentionParams params;
  params.num_heads = 8;
  params.num_kv_heads = 2;
  params.head_size = 128;
  params.scale = 1.0f / std::sqrt(128.0f);
  params.kv_cache_dtype = DType::kBF16;
  const AttentionBackend& backend = find_backend(GetParam());
  auto impl = backend.make_impl(params);

  // Two batches of the same shape (4 decodes + one 6-token prefill, 2 padding rows) with
  // different lengths and block tables; the pool and limits cover both.
  const SyntheticBatchSpec shape_a{.decode_seq_lens = {5, 90, 17, 300},
                                   .prefills = {{40, 6}},
                                   .block_size = 16,
                                   .padding_rows = 2,
                                   .spare_blocks = 40,
                                   .seed = 1};
  const SyntheticBatchSpec shape_b{.decode_seq_lens = {260, 3, 64, 129},
                                   .prefills = {{6, 6}},
                                   .block_size = 16,
                                   .padding_rows = 2,
                                   .spare_blocks = 40,
                                   .seed = 2};
  const SyntheticBatch a = make_synthetic_batch(shape_a), b = make_synthetic_batch(shape_b);
  const int num_blocks = std::max(a.num_blocks, b.num_blocks);
  BatchLimits limits = a.limits();
  limits.max_blocks_per_req = std::max(a.block_table_stride, b.block_table_stride);
  auto builder = backend.make_builder(limits, nullptr);
  Stream stream = Stream::create();

  std::mt19937 rng(77);
  const int rows = a.num_tokens;
  ASSERT_EQ(rows, b.num_tokens);
  HostTensor cache(DType::kBF16, backend.kv_cache_shape(num_blocks, 16, 2, 128, DType::kBF16));
  testing::fill_normal(cache, rng);  // every slot holds some context
  auto kv = upload(cache);
  kv.view = kv_cache_view(backend, kv.buffer.data(), Device::cuda(), num_blocks, 16, 2, 128,
                          DType::kBF16);
  HostTensor query(DType::kBF16, {rows, 8, 128}), key(DType::kBF16, {rows, 2, 128}),
      value(DType::kBF16, {rows, 2, 128});
  auto q = upload(query), k = upload(key), v = upload(value);
  HostTensor out_host(DType::kBF16, {rows, 8, 128});
  auto out = upload(out_host);
  DeviceBuffer workspace(impl->workspace_bytes(limits));
  AttentionLayer layer;
  layer.workspace = TensorView(workspace.data(), DType::kU8,
                               {static_cast<std::int64_t>(workspace.bytes())}, Device::cuda());

  // Capture once against batch a's metadata buffers.
  const AttentionMetadata& md = builder->build(a.metadata(), stream.get());
  cudaGraph_t graph = nullptr;
  FF_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  impl->forward(layer, q.view, k.view, v.view, kv.view, md, out.view, stream.get());
  FF_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
  cudaGraphExec_t exec = nullptr;
  FF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  HostTensor cache_now = cache;
  const TensorView now_layout =
      kv_cache_view(backend, cache_now.data(), Device::cpu(), num_blocks, 16, 2, 128, DType::kBF16);
  for (const SyntheticBatch* batch : {&a, &b, &a}) {
    testing::fill_normal(query, rng, 2.0f);
    testing::fill_normal(key, rng);
    testing::fill_normal(value, rng);
    FF_CUDA_CHECK(cudaMemcpy(q.buffer.data(), query.data(), query.bytes(), cudaMemcpyHostToDevice));
    FF_CUDA_CHECK(cudaMemcpy(k.buffer.data(), key.data(), key.bytes(), cudaMemcpyHostToDevice));
    FF_CUDA_CHECK(cudaMemcpy(v.buffer.data(), value.data(), value.bytes(), cudaMemcpyHostToDevice));
    out_host.fill_bytes(0xFF);
    FF_CUDA_CHECK(
        cudaMemcpy(out.buffer.data(), out_host.data(), out_host.bytes(), cudaMemcpyHostToDevice));
    const AttentionMetadata& fresh = builder->build(batch->metadata(), stream.get());
    ASSERT_EQ(fresh.block_table, md.block_table) << "persistent buffers must not move";
    FF_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
    stream.synchronize();
    download(out.view, out_host);
    host_reference::reshape_and_cache(key.view(), value.view(), now_layout, batch->slot_mapping,
                                      1.0f, 1.0f);
    const auto expected = host_reference::attention(params, query.view(), {}, {}, now_layout,
                                                    batch->metadata(), 1.0f, 1.0f);
    EXPECT_LE(relative_l2(to_doubles(out_host), expected.out), 1e-2);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionGraph, ::testing::Values("reference", "paged_decode"),
                         [](const auto& info) { return std::string(info.param); });

// --- bad input changes nothing ---
TEST(ReferenceAttentionErrors, RejectedCallsLeaveOutputsAndMetadataUntouched) {
  FF_REQUIRE_GPU();
  AttentionParams params;
  params.num_heads = 4;
  params.num_kv_heads = 2;
  params.head_size = 64;
  params.scale = 0.125f;
  params.kv_cache_dtype = DType::kBF16;
  const AttentionBackend& backend = find_backend("reference");
  auto impl = backend.make_impl(params);
  const SyntheticBatch batch =
      make_synthetic_batch({.decode_seq_lens = {10, 20}, .block_size = 16});
  auto builder = backend.make_builder(batch.limits(), nullptr);
  Stream stream = Stream::create();
  std::mt19937 rng(3);
  HostTensor query(DType::kBF16, {2, 4, 64}), key(DType::kBF16, {2, 2, 64}),
      cache(DType::kBF16, {2, batch.num_blocks, 16, 2, 64});
  testing::fill_normal(query, rng);
  testing::fill_normal(key, rng);
  testing::fill_normal(cache, rng);
  auto q = upload(query), k = upload(key), kv = upload(cache);
  HostTensor poison(DType::kBF16, {2, 4, 64});
  poison.fill_bytes(0xFF);
  auto out = upload(poison);
  const AttentionMetadata& md = builder->build(batch.metadata(), stream.get());

  // A wrong LSE shape is rejected before anything runs: output and cache stay as they were.
  HostTensor bad_lse(DType::kF32, {2, 3});
  auto lse = upload(bad_lse);
  AttentionLayer layer;
  EXPECT_THROW(
      impl->forward(layer, q.view, k.view, k.view, kv.view, md, out.view, stream.get(), lse.view),
      Error);
  stream.synchronize();
  HostTensor after(DType::kBF16, {2, 4, 64});
  download(out.view, after);
  EXPECT_EQ(std::memcmp(after.data(), poison.data(), poison.bytes()), 0) << "output was written";
  HostTensor cache_after = cache;
  download(kv.view, cache_after);
  EXPECT_EQ(std::memcmp(cache_after.data(), cache.data(), cache.bytes()), 0) << "cache was written";

  // A batch that breaks the metadata rules is rejected and the previous metadata still works.
  const std::vector<std::int32_t> bad_seq = {10, 0};  // shorter than its one new token
  CommonAttentionMetadata bad = batch.metadata();
  bad.seq_lens = bad_seq;
  try {
    (void)builder->build(bad, stream.get());
    ADD_FAILURE() << "a seq_len shorter than its query was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("request 1: seq_len 0"), std::string::npos) << e.message();
  }
  CommonAttentionMetadata too_many = batch.metadata();
  const std::vector<std::int32_t> qsl = {0, 1, 2, 3};
  too_many.query_start_loc = qsl;
  EXPECT_THROW((void)builder->build(too_many, stream.get()), Error);
  impl->forward(layer, q.view, k.view, k.view, kv.view, md, out.view, stream.get());
  stream.synchronize();
  download(out.view, after);
  for (std::int64_t i = 0; i < after.numel(); ++i) ASSERT_TRUE(std::isfinite(after.get(i))) << i;
}

}  // namespace
}  // namespace freezeframe
