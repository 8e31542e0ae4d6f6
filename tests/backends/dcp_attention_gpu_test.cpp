// Attention over DCP shards, merged, against attention over the whole sequences: a backend's
// forward (paged_decode's with each prefill kernel, the reference backend's) on each of D ranks
// (its shard of every sequence's keys, the token at position p on rank (p div I) mod D, new tokens
// written by the forward where the rank holds them) with its LSE, the partial results merged by
// their LSEs (the host reference's merge), equal the host reference's attention over the unsharded
// cache. Decode rows take the decode kernel; prefill rows, fresh and chunked over a context, take
// each prefill kernel with the causal mask in sequence positions (dcp_context_lens through the
// plan). Random inputs, poisoned outputs, shards shorter than D · I (some empty) included; a
// soft cap and an fp8 cache too.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/backends/dcp_shard.h"
#include "freezeframe/backends/host_reference.h"
#include "freezeframe/backends/metadata_builder.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/backends/synthetic_batch.h"
#include "freezeframe/core/cuda_handles.h"
#include "prefill/sm90/prefill_sm90_launch.h"
#include "support/device_tensor.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

using testing::download;
using testing::relative_l2;
using testing::to_doubles;
using testing::upload;

struct Case {
  const char* name;
  int world = 2, interleave = 1;
  const char* prefill_kernel = "sm90";  // FREEZEFRAME_PREFILL_KERNEL (paged_decode)
  DType dtype = DType::kBF16;
  int heads = 8, kv_heads = 2, head_size = 128, block_size = 16;
  double tolerance = 1e-2;
  const char* backend = "paged_decode";
  /// The cache's: `dtype` when empty; fp8: keys and values stored scaled in e4m3.
  std::optional<DType> cache_dtype = std::nullopt;
  float softcap = 0.0f;  ///< logits_soft_cap
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

DType cache_dtype_of(const Case& c) { return c.cache_dtype.value_or(c.dtype); }

/// One rank's view of the batch: its shard's lengths, block tables and slots.
struct RankBatch {
  std::vector<std::int32_t> seq_lens, block_table, context_lens;
  std::vector<std::int64_t> new_slots, context_slots;
  int stride = 0, num_blocks = 0;
};

/// Rank `rank`'s shard of `whole`: request i's local token j (its j-th position on the rank)
/// in block j div block_size of its own ids (a permutation of the rank's pool), offset j mod
/// block_size; the slots of the positions it holds, −1 for the others.
RankBatch shard_of(const SyntheticBatch& whole, const Case& c, int rank, std::mt19937& rng) {
  RankBatch b;
  const int reqs = whole.num_reqs(), bs = c.block_size;
  std::vector<int> blocks_of(reqs);
  for (int i = 0; i < reqs; ++i) {
    const int held = dcp_shard_tokens(whole.seq_lens[i], c.world, c.interleave, rank);
    b.seq_lens.push_back(held);
    b.context_lens.push_back(whole.seq_lens[i] -
                             (whole.query_start_loc[i + 1] - whole.query_start_loc[i]));
    blocks_of[i] = std::max(1, (held + bs - 1) / bs);
    b.stride = std::max(b.stride, blocks_of[i]);
  }
  b.num_blocks = std::accumulate(blocks_of.begin(), blocks_of.end(), 0) + 2;
  std::vector<std::int32_t> ids(b.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  b.block_table.assign(std::size_t(reqs) * b.stride, 0);
  int next = 0;
  for (int i = 0; i < reqs; ++i) {
    for (int k = 0; k < blocks_of[i]; ++k) b.block_table[i * b.stride + k] = ids[next++];
  }
  // Position p of request i: its local index when this rank holds it.
  for (int i = 0; i < reqs; ++i) {
    const int len = whole.seq_lens[i];
    const int context = b.context_lens[i];
    for (int p = 0; p < len; ++p) {
      std::int64_t slot = -1;
      if ((p / c.interleave) % c.world == rank) {
        const int j = dcp_shard_tokens(p, c.world, c.interleave, rank);  // held before p
        slot = std::int64_t(b.block_table[i * b.stride + j / bs]) * bs + j % bs;
      }
      (p < context ? b.context_slots : b.new_slots).push_back(slot);
    }
  }
  for (int r = whole.query_start_loc.back(); r < whole.num_tokens; ++r) b.new_slots.push_back(-1);
  return b;
}

class DcpAttention : public ::testing::TestWithParam<Case> {};

TEST_P(DcpAttention, MergedShardsMatchTheWholeSequences) {
  FF_REQUIRE_GPU();
  const Case& c = GetParam();
  const bool paged = std::string(c.backend) == "paged_decode";
  if (paged && std::string(c.prefill_kernel) == "sm90" && !prefill::sm90_available()) {
    GTEST_SKIP() << "the Hopper prefill kernel needs an sm_90 GPU and a build for sm_90a";
  }
  if (paged) setenv("FREEZEFRAME_PREFILL_KERNEL", c.prefill_kernel, 1);
  std::mt19937 rng(4321);

  AttentionParams params;
  params.num_heads = c.heads;
  params.num_kv_heads = c.kv_heads;
  params.head_size = c.head_size;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
  params.kv_cache_dtype = cache_dtype_of(c);
  params.logits_soft_cap = c.softcap;
  const AttentionBackend& backend = find_backend(c.backend);
  // fp8 keys and values are scaled into e4m3's range; the reference reads the same cache, so
  // the merged output is held to the 16-bit tolerance (what fp8 itself costs is
  // attention_gpu_test's to bound).
  const bool fp8 = is_fp8(cache_dtype_of(c));
  const float k_scale = fp8 ? 0.02f : 1.0f, v_scale = fp8 ? 0.03f : 1.0f;

  // Decodes (one of a sequence of 1, so most shards are empty), then prefills: fresh ones
  // shorter than D · I, a chunk over a context, one across two plan tiles of 128 tokens.
  SyntheticBatchSpec spec{.decode_seq_lens = {1, 3, 37, 160, 700},
                          .prefills = {{5, 5}, {53, 20}, {17, 17}, {300, 150}, {2, 2}, {90, 9}},
                          .block_size = c.block_size,
                          .padding_rows = 3,
                          .seed = 17};
  const SyntheticBatch whole = make_synthetic_batch(spec);
  const int rows = whole.num_tokens, reqs = whole.num_reqs();
  const auto new_rows = static_cast<std::int64_t>(whole.slot_mapping.size());
  const auto ctx_rows = static_cast<std::int64_t>(whole.context_slot_mapping.size());
  HostTensor query(c.dtype, {rows, c.heads, c.head_size}),
      key(c.dtype, {new_rows, c.kv_heads, c.head_size}),
      value(c.dtype, {new_rows, c.kv_heads, c.head_size}),
      ctx_key(c.dtype, {ctx_rows, c.kv_heads, c.head_size}),
      ctx_value(c.dtype, {ctx_rows, c.kv_heads, c.head_size});
  testing::fill_normal(query, rng, 2.0f);
  testing::fill_normal(key, rng);
  testing::fill_normal(value, rng);
  testing::fill_normal(ctx_key, rng);
  testing::fill_normal(ctx_value, rng);

  // The whole: every position in one cache, attended by the host reference.
  auto cache_of = [&](int num_blocks, void* data, Device device) {
    return kv_cache_view(backend, data, device, num_blocks, c.block_size, c.kv_heads, c.head_size,
                         cache_dtype_of(c));
  };
  HostTensor whole_cache(cache_dtype_of(c),
                         {2, whole.num_blocks, c.block_size, c.kv_heads, c.head_size});
  whole_cache.fill_bytes(0);
  const TensorView whole_view = cache_of(whole.num_blocks, whole_cache.data(), Device::cpu());
  host_reference::reshape_and_cache(ctx_key.view(), ctx_value.view(), whole_view,
                                    whole.context_slot_mapping, k_scale, v_scale);
  host_reference::reshape_and_cache(key.view(), value.view(), whole_view, whole.slot_mapping,
                                    k_scale, v_scale);
  const auto expected = host_reference::attention(params, query.view(), {}, {}, whole_view,
                                                  whole.metadata(), k_scale, v_scale);

  // Each rank: its shard's context in its cache (garbage elsewhere), the forward with LSE.
  Stream stream = Stream::create();
  auto q = upload(query), k = upload(key), v = upload(value);
  const std::int64_t out_elems = std::int64_t(rows) * c.heads * c.head_size;
  std::vector<double> partial_out, partial_lse;
  for (int rank = 0; rank < c.world; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankBatch b = shard_of(whole, c, rank, rng);
    HostTensor cache(cache_dtype_of(c), {2, b.num_blocks, c.block_size, c.kv_heads, c.head_size});
    std::uniform_int_distribution<int> byte(0, 255);
    for (std::size_t i = 0; i < cache.bytes(); ++i) {
      cache.data()[i] = static_cast<std::uint8_t>(byte(rng) & 0x3F);
    }
    host_reference::reshape_and_cache(ctx_key.view(), ctx_value.view(),
                                      cache_of(b.num_blocks, cache.data(), Device::cpu()),
                                      b.context_slots, k_scale, v_scale);
    CommonAttentionMetadata common;
    common.query_start_loc = whole.query_start_loc;
    common.seq_lens = b.seq_lens;
    common.block_table = b.block_table;
    common.block_table_stride = b.stride;
    common.slot_mapping = b.new_slots;
    common.num_tokens = rows;
    common.num_decodes = whole.num_decodes;
    common.dcp_context_lens = b.context_lens;
    BatchLimits limits;
    limits.max_num_reqs = reqs;
    limits.max_num_tokens = rows;
    limits.max_blocks_per_req = b.stride;
    limits.block_size = c.block_size;
    limits.num_blocks = b.num_blocks;

    auto impl = backend.make_impl(params, DcpGroup{c.world, rank, c.interleave});
    auto builder = backend.make_builder(limits, nullptr);
    auto kv = upload(cache);
    HostTensor out_host(c.dtype, {rows, c.heads * c.head_size}),
        lse_host(DType::kF32, {rows, c.heads});
    out_host.fill_bytes(0xFF);  // NaN in bf16, f16 and f32
    lse_host.fill_bytes(0xFF);
    auto out = upload(out_host);
    auto lse = upload(lse_host);
    DeviceBuffer workspace(impl->workspace_bytes(limits));
    AttentionLayer layer;
    layer.name = "layers.0.attn";
    layer.k_scale = k_scale;
    layer.v_scale = v_scale;
    layer.workspace = TensorView(workspace.data(), DType::kU8,
                                 {static_cast<std::int64_t>(workspace.bytes())}, Device::cuda());
    const AttentionMetadata& md = builder->build(common, stream.get());
    impl->forward(layer, q.view, k.view, v.view,
                  cache_of(b.num_blocks, kv.buffer.data(), Device::cuda()), md, out.view,
                  stream.get(), lse.view);
    stream.synchronize();
    download(out.view, out_host);
    download(lse.view, lse_host);
    const std::vector<double> o = to_doubles(out_host);
    for (std::int64_t i = 0; i < out_elems; ++i) {
      ASSERT_FALSE(std::isnan(o[i])) << "output element " << i << " unwritten or NaN";
    }
    for (std::int64_t i = 0; i < lse_host.numel(); ++i) {
      const double x = lse_host.get(i);
      ASSERT_FALSE(std::isnan(x)) << "LSE " << i << " unwritten or NaN";
      partial_lse.push_back(x);
    }
    partial_out.insert(partial_out.end(), o.begin(), o.end());
  }

  std::vector<double> merged, merged_lse;
  host_reference::merge_attention_states(partial_out, partial_lse, c.world, rows, c.heads,
                                         c.head_size, merged, merged_lse);
  const double err = relative_l2(merged, expected.out);
  EXPECT_LE(err, c.tolerance) << "relative L2 error of the merged output";
  double lse_err = 0.0;
  for (std::size_t i = 0; i < merged_lse.size(); ++i) {
    const double want = expected.lse_ln[i];
    if (std::isinf(want)) {
      ASSERT_EQ(merged_lse[i], want) << "LSE " << i;
    } else {
      lse_err = std::max(lse_err, std::abs(merged_lse[i] - want) / std::max(1.0, std::abs(want)));
    }
  }
  EXPECT_LE(lse_err, 1e-4) << "largest relative error of the merged LSE";
  RecordProperty("relative_l2", std::to_string(err));
  unsetenv("FREEZEFRAME_PREFILL_KERNEL");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* kernel : {"sm90", "mma_sync"}) {
    const bool hopper = std::string(kernel) == "sm90";
    out.push_back({.name = hopper ? "d2_i1_sm90" : "d2_i1_mma_sync", .prefill_kernel = kernel});
    out.push_back({.name = hopper ? "d2_i16_sm90" : "d2_i16_mma_sync",
                   .interleave = 16,
                   .prefill_kernel = kernel});
    out.push_back(
        {.name = hopper ? "d4_i1_sm90" : "d4_i1_mma_sync", .world = 4, .prefill_kernel = kernel});
    out.push_back({.name = hopper ? "d4_i16_block64_d64_sm90" : "d4_i16_block64_d64_mma_sync",
                   .world = 4,
                   .interleave = 16,
                   .prefill_kernel = kernel,
                   .heads = 16,
                   .kv_heads = 2,
                   .head_size = 64,
                   .block_size = 64});
    out.push_back({.name = hopper ? "d2_i4_f16_d256_mqa_sm90" : "d2_i4_f16_d256_mqa_mma_sync",
                   .interleave = 4,
                   .prefill_kernel = kernel,
                   .dtype = DType::kF16,
                   .heads = 4,
                   .kv_heads = 1,
                   .head_size = 256,
                   .tolerance = 5e-3});
  }
  // A soft cap and an fp8 cache under DCP: the partial LSEs are of the capped scores, and the
  // shards read the same quantised values the whole would. The Hopper prefill kernel takes no
  // fp8 cache (the mma.sync kernel runs those rows).
  out.push_back({.name = "d2_i16_softcap_sm90", .interleave = 16, .softcap = 30.0f});
  out.push_back({.name = "d2_i16_softcap_mma_sync",
                 .interleave = 16,
                 .prefill_kernel = "mma_sync",
                 .softcap = 30.0f});
  out.push_back(
      {.name = "d2_i1_fp8_mma_sync", .prefill_kernel = "mma_sync", .cache_dtype = DType::kFp8E4M3});
  out.push_back({.name = "d4_i16_fp8_softcap_mma_sync",
                 .world = 4,
                 .interleave = 16,
                 .prefill_kernel = "mma_sync",
                 .cache_dtype = DType::kFp8E4M3,
                 .softcap = 30.0f});
  out.push_back({.name = "d2_i4_fp8_softcap_reference",
                 .interleave = 4,
                 .backend = "reference",
                 .cache_dtype = DType::kFp8E4M3,
                 .softcap = 30.0f});
  // The reference backend masks prefill rows over a shard by the positions its plan stages.
  out.push_back({.name = "d2_i1_reference", .backend = "reference"});
  out.push_back({.name = "d4_i16_block64_d64_reference",
                 .world = 4,
                 .interleave = 16,
                 .heads = 16,
                 .kv_heads = 2,
                 .head_size = 64,
                 .block_size = 64,
                 .backend = "reference"});
  out.push_back({.name = "d2_i4_f16_d256_mqa_reference",
                 .interleave = 4,
                 .dtype = DType::kF16,
                 .heads = 4,
                 .kv_heads = 1,
                 .head_size = 256,
                 .tolerance = 5e-3,
                 .backend = "reference"});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shards, DcpAttention, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace freezeframe
