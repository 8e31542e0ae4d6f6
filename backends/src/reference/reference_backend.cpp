#include <array>
#include <cmath>

#include "freezeframe/backends/attention_type.h"
#include "freezeframe/base/error.h"
#include "kernels/cache_write.h"
#include "reference/launch.h"
#include "reference/positions_plan.h"
#include "reference/reference_backends.h"
#include "validate.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

constexpr std::array<int, 9> kHeadSizes = {32, 64, 80, 96, 112, 128, 160, 192, 256};
constexpr std::array<DType, 3> kCacheDTypes = {DType::kBF16, DType::kF16, DType::kFp8E4M3};

class ReferenceImpl final : public AttentionImpl {
 public:
  using AttentionImpl::AttentionImpl;

  bool can_return_lse_for_decode() const override { return true; }
  bool fused_output_quant_supported(const QuantKey&) const override { return false; }
  std::size_t workspace_bytes(const BatchLimits&) const override { return 0; }

  void forward(const AttentionLayer& layer, const TensorView& query, const TensorView& key,
               const TensorView& value, const TensorView& kv_cache, const AttentionMetadata& md,
               const TensorView& output, cudaStream_t stream, const TensorView& lse_ln,
               const OutputQuant& quant) override;
};

void ReferenceImpl::forward(const AttentionLayer& layer, const TensorView& query,
                            const TensorView& key, const TensorView& value,
                            const TensorView& kv_cache, const AttentionMetadata& md,
                            const TensorView& output, cudaStream_t stream, const TensorView& lse_ln,
                            const OutputQuant& quant) {
  const AttentionParams& p = params();
  FF_CHECK(!quant.output_scale.defined() && !quant.output_block_scale.defined(), E::kUnsupported,
           "the reference backend does not fuse output quantisation (layer '", layer.name, "')");
  const int rows = md.num_tokens;
  check_query(query, "query", rows, p.num_heads, p.head_size);
  const TensorView out = output_as_3d(output, query.dtype(), rows, p.num_heads, p.head_size);
  check_lse(lse_ln, rows, p.num_heads);

  reference::AttentionLaunch launch;
  launch.query = query;
  launch.output = out;
  launch.lse_ln = lse_ln;
  launch.num_rows = rows;
  launch.req_end = md.num_reqs;
  launch.query_start_loc = md.query_start_loc;
  launch.seq_lens = md.seq_lens;
  launch.num_heads = p.num_heads;
  launch.num_kv_heads = p.num_kv_heads;
  launch.head_size_qk = p.head_size;
  launch.head_size_v = p.head_size;
  launch.scale = p.scale;
  launch.softcap = p.logits_soft_cap;
  launch.sliding_window = p.sliding_window.value_or(0);
  launch.causal = p.attn_type == AttentionType::kDecoder;
  launch.alibi_slopes = p.alibi_slopes;
  if (dcp_world_size() > 1) {
    // The keys are this rank's shard: rows are masked by their positions, which the plan
    // holds (read under DCP only, where seq_lens no longer imply them).
    launch.first_positions = static_cast<const std::int32_t*>(md.plan);
    launch.dcp = dcp_group();
  }

  if (!uses_kv_cache(p.attn_type)) {
    // Encoder / encoder-only: bidirectional over the step's own rows, no cache.
    check_kv_rows(key, "key", query.dtype(), rows, p.num_kv_heads, p.head_size);
    check_kv_rows(value, "value", query.dtype(), rows, p.num_kv_heads, p.head_size);
    for (int r = 0; r < md.num_reqs; ++r) {
      const int query_len = md.query_start_loc_host[r + 1] - md.query_start_loc_host[r];
      FF_CHECK(md.seq_lens_host[r] == query_len, E::kInvalidArgument, "layer '", layer.name, "' (",
               to_string(p.attn_type), "): request ", r, " has seq_len ", md.seq_lens_host[r],
               " but ", query_len,
               " tokens; encoder attention has no context, so they must be equal");
    }
    reference::ContiguousSource source{key, value, md.query_start_loc, 0};
    reference::launch_attention(launch, source, stream);
    return;
  }

  check_kv_cache(kv_cache, p.kv_cache_dtype, p.num_kv_heads, p.head_size);
  const TensorView k_cache = kv_cache.select(0, 0), v_cache = kv_cache.select(0, 1);
  const bool writes_cache = p.kv_sharing_target_layer_name.empty();
  const bool has_new_kv = key.defined() || value.defined();
  if (p.attn_type == AttentionType::kDecoder && writes_cache) {
    FF_CHECK(has_new_kv, E::kInvalidArgument, "layer '", layer.name,
             "': decoder attention needs this step's key and value");
  }
  if (has_new_kv && writes_cache) {
    check_kv_rows(key, "key", query.dtype(), md.num_slots, p.num_kv_heads, p.head_size);
    check_kv_rows(value, "value", query.dtype(), md.num_slots, p.num_kv_heads, p.head_size);
    kernels::launch_reshape_and_cache(key, value, k_cache, v_cache, md.slot_mapping, md.num_slots,
                                      layer.k_scale, layer.v_scale, stream);
  }

  reference::launch_attention(
      launch,
      reference::paged_source(k_cache, v_cache, kv_cache.dtype(), md, layer.k_scale, layer.v_scale),
      stream);
}

class ReferenceBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "reference"; }
  bool is_mla() const override { return false; }
  GraphSupport graph_support() const override { return GraphSupport::kAlways; }
  bool accept_output_buffer() const override { return true; }
  bool supports_quant_query_input() const override { return false; }
  bool supports_dcp_prefill() const override { return true; }
  std::size_t plan_bytes(const BatchLimits& limits, const DeviceProperties&) const override {
    return reference::positions_plan_bytes(limits);
  }
  void plan(const CommonAttentionMetadata& common, std::span<std::byte> slice) const override {
    reference::write_positions_plan(common, slice);
  }
  std::span<const int> supported_head_sizes() const override { return kHeadSizes; }
  std::span<const DType> supported_kv_cache_dtypes() const override { return kCacheDTypes; }

  std::vector<std::int64_t> kv_cache_shape(std::int64_t num_blocks, int block_size,
                                           int num_kv_heads, int head_size, DType) const override {
    return {2, num_blocks, block_size, num_kv_heads, head_size};
  }
  std::vector<int> kv_cache_stride_order() const override { return {0, 1, 2, 3, 4}; }

  std::unique_ptr<AttentionImpl> make_impl(const AttentionParams& p, DcpGroup dcp) const override {
    check_common_params(*this, p);
    check_dcp(dcp, /*can_return_lse=*/true, name());
    check_positional_features(p, dcp, name());
    return std::make_unique<ReferenceImpl>(p, dcp);
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_reference_backend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace freezeframe
