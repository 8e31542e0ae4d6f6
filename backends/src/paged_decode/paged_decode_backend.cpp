// The paged decode backend: split-KV decode kernels for single-token queries; other rows of a
// mixed batch (prefill chunks, padding) go to the reference kernel.
//
// Graph support: every launch's shape follows the step's row count, and the split count
// follows the row count and the device (DecodeSplitPolicy), never the lengths. The one launch
// whose presence depends on the batch is the kernel for non-decode rows, which runs only when
// the step has such rows — exactly what a batch descriptor's uniform-decode flag records — so
// full graphs are valid for every batch the dispatcher keys correctly.

#include <algorithm>
#include <array>
#include <cmath>

#include "freezeframe/backends/attention_type.h"
#include "freezeframe/core/device.h"
#include "freezeframe/core/error.h"
#include "paged_decode/decode_launch.h"
#include "paged_decode/split_policy.h"
#include "reference/launch.h"
#include "reference/reference_backends.h"
#include "validate.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

constexpr std::array<int, 3> kHeadSizes = {64, 128, 256};
constexpr std::array<DType, 3> kCacheDTypes = {DType::kBF16, DType::kF16, DType::kFp8E4M3};

/// Query heads one CTA serves: the largest of 8, 4, 2, 1 dividing the GQA group (8 = one mma
/// tile of heads; larger groups take several CTAs per KV head).
int heads_per_cta(int group_size) {
  for (int h = 8; h > 1; h /= 2) {
    if (group_size % h == 0) return h;
  }
  return 1;
}

/// Split-KV scratch of a launch over `rows` rows in `splits` splits: the partial outputs (f32,
/// rounded up to 256 bytes), then the partial LSEs.
struct SplitWorkspace {
  std::size_t partial_lse = 0, total = 0;

  SplitWorkspace(const AttentionParams& p, int splits, int rows) {
    if (splits == 1) return;
    const std::size_t states = std::size_t(splits) * rows * p.num_heads;
    partial_lse = (states * p.head_size * sizeof(float) + 255) / 256 * 256;
    total = partial_lse + states * sizeof(float);
  }
};

/// The longest sequence a row may hold: the block table's row length × the block size.
long max_seq_tokens(const BatchLimits& limits) {
  return static_cast<long>(limits.max_blocks_per_req) * std::max(limits.block_size, 1);
}

/// Workspace for every row count within `limits` at the most splits `policy` may choose, so
/// it holds whatever split count the kernel's occupancy leads to.
std::size_t workspace_for(const AttentionParams& p, const BatchLimits& limits,
                          const DecodeSplitPolicy& policy) {
  const int ctas_per_row = p.num_heads / heads_per_cta(p.num_heads / p.num_kv_heads);
  std::size_t most = 0;
  for (int rows = 1; rows <= limits.max_num_tokens; ++rows) {
    const int splits = policy.most_splits(rows, ctas_per_row, max_seq_tokens(limits));
    most = std::max(most, SplitWorkspace(p, splits, rows).total);
  }
  return most;
}

class PagedDecodeImpl final : public AttentionImpl {
 public:
  PagedDecodeImpl(const AttentionParams& params, DcpGroup dcp)
      : AttentionImpl(params, dcp),
        heads_per_cta_(heads_per_cta(params.num_heads / params.num_kv_heads)),
        policy_(DecodeSplitPolicy::for_current_device()) {
    // The split count follows this kernel's occupancy: read it once here, so that every
    // forward agrees (the workspace is sized for any occupancy). f16 and bf16 queries compile
    // alike. A GPU the build has no code for answers with an error: the impl is still made
    // (spec validation makes one), and the engine refuses such a GPU before it runs anything.
    if (has_gpu()) {
      const DType kv = params.kv_cache_dtype;
      try {
        policy_.resident_ctas_per_sm = paged_decode::resident_ctas_per_sm(
            kv == DType::kF16 ? DType::kF16 : DType::kBF16, kv, params.head_size, heads_per_cta_);
      } catch (const Error&) {
        (void)cudaGetLastError();
      }
    }
  }

  bool can_return_lse_for_decode() const override { return true; }
  bool fused_output_quant_supported(const QuantKey&) const override { return false; }

  std::size_t workspace_bytes(const BatchLimits& limits) const override {
    return workspace_for(params(), limits, policy_);
  }

  void forward(const AttentionLayer& layer, const TensorView& query, const TensorView& key,
               const TensorView& value, const TensorView& kv_cache, const AttentionMetadata& md,
               const TensorView& output, cudaStream_t stream, const TensorView& lse_ln,
               const OutputQuant& quant) override;

 private:
  int heads_per_cta_;
  DecodeSplitPolicy policy_;
};

void PagedDecodeImpl::forward(const AttentionLayer& layer, const TensorView& query,
                              const TensorView& key, const TensorView& value,
                              const TensorView& kv_cache, const AttentionMetadata& md,
                              const TensorView& output, cudaStream_t stream,
                              const TensorView& lse_ln, const OutputQuant& quant) {
  const AttentionParams& p = params();
  FF_CHECK(!quant.output_scale.defined() && !quant.output_block_scale.defined(), E::kUnsupported,
           "the paged_decode backend does not fuse output quantisation (layer '", layer.name, "')");
  const int rows = md.num_tokens;
  check_query(query, "query", rows, p.num_heads, p.head_size);
  const TensorView out = output_as_3d(output, query.dtype(), rows, p.num_heads, p.head_size);
  check_lse(lse_ln, rows, p.num_heads);
  check_kv_cache(kv_cache, p.kv_cache_dtype, p.num_kv_heads, p.head_size);
  const TensorView k_cache = kv_cache.select(0, 0), v_cache = kv_cache.select(0, 1);
  const auto elem = static_cast<std::int64_t>(size_of(kv_cache.dtype()));
  FF_CHECK((k_cache.stride(0) * elem) % 16 == 0 && (k_cache.stride(1) * elem) % 16 == 0 &&
               (k_cache.stride(2) * elem) % 16 == 0,
           E::kInvalidArgument,
           "paged_decode reads the cache in 16-byte vectors: its block, "
           "token and head strides must be multiples of 16 bytes");
  const int block_size = static_cast<int>(k_cache.size(1));
  const int splits = policy_.splits(rows, p.num_heads / heads_per_cta_,
                                    static_cast<long>(md.block_table_stride) * block_size);
  const SplitWorkspace ws(p, splits, rows);
  FF_CHECK(ws.total == 0 || (layer.workspace.defined() && layer.workspace.is_cuda() &&
                             static_cast<std::size_t>(layer.workspace.span_bytes()) >= ws.total),
           E::kOutOfMemory, "layer '", layer.name, "': the split-KV workspace holds ",
           layer.workspace.defined() ? layer.workspace.span_bytes() : 0, " bytes; ", rows,
           " rows in ", splits, " splits need ", ws.total);

  const bool writes_cache = p.kv_sharing_target_layer_name.empty();
  if (writes_cache) {
    FF_CHECK(key.defined() && value.defined(), E::kInvalidArgument, "layer '", layer.name,
             "': decoder attention needs this step's key and value");
    check_kv_rows(key, "key", query.dtype(), md.num_slots, p.num_kv_heads, p.head_size);
    check_kv_rows(value, "value", query.dtype(), md.num_slots, p.num_kv_heads, p.head_size);
    reference::launch_reshape_and_cache(key, value, k_cache, v_cache, md.slot_mapping, md.num_slots,
                                        layer.k_scale, layer.v_scale, stream);
  }
  const bool fp8 = is_fp8(kv_cache.dtype());

  paged_decode::DecodeParams d;
  d.q = query.data();
  d.q_stride_token = query.stride(0);
  d.q_stride_head = query.stride(1);
  d.out = out.data();
  d.out_stride_token = out.stride(0);
  d.out_stride_head = out.stride(1);
  d.lse = lse_ln.defined() ? lse_ln.data_as<float>() : nullptr;
  d.lse_stride_token = lse_ln.defined() ? lse_ln.stride(0) : 0;
  if (splits > 1) {
    auto* base = static_cast<std::uint8_t*>(layer.workspace.data());
    d.partial_out = reinterpret_cast<float*>(base);
    d.partial_lse = reinterpret_cast<float*>(base + ws.partial_lse);
  }
  d.k_cache = k_cache.data();
  d.v_cache = v_cache.data();
  d.stride_block = k_cache.stride(0);
  d.stride_token = k_cache.stride(1);
  d.stride_head = k_cache.stride(2);
  d.block_table = md.block_table;
  d.block_table_stride = md.block_table_stride;
  FF_CHECK(block_size > 0 && (block_size & (block_size - 1)) == 0, E::kUnsupported,
           "paged_decode needs a power-of-two block size, got ", block_size);
  while ((1 << d.block_shift) < block_size) ++d.block_shift;
  d.query_start_loc = md.query_start_loc;
  d.seq_lens = md.seq_lens;
  d.num_reqs = md.num_reqs;
  d.num_rows = rows;
  d.num_heads = p.num_heads;
  d.num_kv_heads = p.num_kv_heads;
  d.num_splits = splits;
  d.q_scale = p.scale * (fp8 ? layer.k_scale : 1.0f);
  d.v_scale = fp8 ? layer.v_scale : 1.0f;
  d.softcap = p.logits_soft_cap;
  d.sliding_window = p.sliding_window.value_or(0);
  d.use_alibi = !p.alibi_slopes.empty();
  std::copy(p.alibi_slopes.begin(), p.alibi_slopes.end(), d.alibi);
  paged_decode::launch_decode(d, query.dtype(), kv_cache.dtype(), p.head_size, heads_per_cta_,
                              stream);
  if (splits > 1) paged_decode::launch_combine(d, query.dtype(), p.head_size, stream);

  if (md.num_decode_tokens < rows) {  // prefill chunks and padding rows
    reference::AttentionLaunch rest;
    rest.query = query;
    rest.output = out;
    rest.lse_ln = lse_ln;
    rest.num_rows = rows;
    rest.req_end = md.num_reqs;
    rest.query_start_loc = md.query_start_loc;
    rest.seq_lens = md.seq_lens;
    rest.num_heads = p.num_heads;
    rest.num_kv_heads = p.num_kv_heads;
    rest.head_size_qk = rest.head_size_v = p.head_size;
    rest.scale = p.scale;
    rest.softcap = p.logits_soft_cap;
    rest.sliding_window = p.sliding_window.value_or(0);
    rest.causal = true;
    rest.skip_single_token_queries = true;
    rest.alibi_slopes = p.alibi_slopes;
    reference::launch_attention(rest,
                                reference::paged_source(k_cache, v_cache, kv_cache.dtype(), md,
                                                        layer.k_scale, layer.v_scale),
                                stream);
  }
}

class PagedDecodeBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "paged_decode"; }
  bool is_mla() const override { return false; }
  GraphSupport graph_support() const override { return GraphSupport::kAlways; }
  bool accept_output_buffer() const override { return true; }
  bool supports_quant_query_input() const override { return false; }
  std::span<const int> supported_head_sizes() const override { return kHeadSizes; }
  std::span<const DType> supported_kv_cache_dtypes() const override { return kCacheDTypes; }

  std::vector<std::int64_t> kv_cache_shape(std::int64_t num_blocks, int block_size,
                                           int num_kv_heads, int head_size, DType) const override {
    return {2, num_blocks, block_size, num_kv_heads, head_size};
  }
  // Head-major inside a block: one KV head's rows of a block are contiguous, so a CTA that
  // serves one KV head streams whole blocks.
  std::vector<int> kv_cache_stride_order() const override { return {0, 1, 3, 2, 4}; }

  std::size_t workspace_bytes(const AttentionParams& p, const BatchLimits& limits,
                              const DeviceProperties& device) const override {
    return workspace_for(p, limits, DecodeSplitPolicy::for_device(device));
  }

  std::unique_ptr<AttentionImpl> make_impl(const AttentionParams& p, DcpGroup dcp) const override {
    check_common_params(*this, p);
    check_dcp(dcp, /*can_return_lse=*/true, name());
    FF_CHECK(p.attn_type == AttentionType::kDecoder, E::kUnsupported,
             "backend 'paged_decode' runs decoder attention only, not ", to_string(p.attn_type));
    FF_CHECK(p.num_heads <= paged_decode::kMaxHeads, E::kUnsupported,
             "backend 'paged_decode' supports at most ", paged_decode::kMaxHeads, " heads");
    return std::make_unique<PagedDecodeImpl>(p, dcp);
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_paged_decode_backend() {
  return std::make_unique<PagedDecodeBackend>();
}

}  // namespace freezeframe
