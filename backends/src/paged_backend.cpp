// The paged backend ("paged"; "paged_decode" is its old name, kept as an alias): one impl
// composed of two kernel policies. In a step, the rows of
// single-token requests go to the split-KV decode kernel and every other row (prefills,
// chunked prefills over a cached prefix, padding) to the tensor-core prefill kernel, whose
// tile schedule the backend's plan hook writes into the step's staged image. Encoder
// self-attention (no cache) runs wholly on the prefill kernel; cross-attention reads the cache
// like a decoder, without the causal mask.
//
// Graph support: every launch's shape follows the step's row count and the device (the split
// count through DecodeSplitPolicy, the prefill grid through its occupancy), never the lengths.
// The one launch whose presence depends on the batch is the prefill kernel, which runs only
// when the step has rows other than leading decodes — exactly what a batch descriptor's
// uniform-decode flag records — so full graphs are valid for every batch the dispatcher keys
// correctly.

#include <array>

#include "freezeframe/backends/attention_type.h"
#include "freezeframe/base/error.h"
#include "kernels/cache_write.h"
#include "kernels/head_sizes.h"
#include "paged_decode/decode_policy.h"
#include "prefill/prefill_policy.h"
#include "reference/reference_backends.h"
#include "validate.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

constexpr std::array<DType, 3> kCacheDTypes = {DType::kBF16, DType::kF16, DType::kFp8E4M3};

/// The kernels read rows in 16-byte pieces.
void check_16_byte_rows(const TensorView& t, std::string_view what, int dims) {
  const auto elem = static_cast<std::int64_t>(size_of(t.dtype()));
  bool aligned = reinterpret_cast<std::uintptr_t>(t.data()) % 16 == 0;
  for (int d = 0; d < dims; ++d) aligned = aligned && (t.stride(d) * elem) % 16 == 0;
  FF_CHECK(aligned, E::kInvalidArgument, "the paged backend reads ", what,
           " in 16-byte pieces: its start and its strides (but the last) must be multiples of "
           "16 bytes");
}

class PagedImpl final : public AttentionImpl {
 public:
  PagedImpl(const AttentionParams& params, DcpGroup dcp)
      : AttentionImpl(params, dcp), decode_(params), prefill_(params, dcp) {}

  bool can_return_lse_for_decode() const override { return true; }
  bool fused_output_quant_supported(const QuantKey&) const override { return false; }

  std::size_t workspace_bytes(const BatchLimits& limits) const override {
    return decode_.workspace_bytes(limits);
  }

  void forward(const AttentionLayer& layer, const TensorView& query, const TensorView& key,
               const TensorView& value, const TensorView& kv_cache, const AttentionMetadata& md,
               const TensorView& output, cudaStream_t stream, const TensorView& lse_ln,
               const OutputQuant& quant) override;

 private:
  DecodePolicy decode_;
  PrefillPolicy prefill_;
};

void PagedImpl::forward(const AttentionLayer& layer, const TensorView& query, const TensorView& key,
                        const TensorView& value, const TensorView& kv_cache,
                        const AttentionMetadata& md, const TensorView& output, cudaStream_t stream,
                        const TensorView& lse_ln, const OutputQuant& quant) {
  const AttentionParams& p = params();
  FF_CHECK(!quant.output_scale.defined() && !quant.output_block_scale.defined(), E::kUnsupported,
           "the paged backend does not fuse output quantisation (layer '", layer.name, "')");
  const int rows = md.num_tokens;
  check_query(query, "query", rows, p.num_heads, p.head_size);
  check_16_byte_rows(query, "the query", 2);
  AttentionCall call;
  call.layer = &layer;
  call.md = &md;
  call.query = query;
  call.output = output_as_3d(output, query.dtype(), rows, p.num_heads, p.head_size);
  call.lse_ln = lse_ln;
  check_lse(lse_ln, rows, p.num_heads);

  if (!uses_kv_cache(p.attn_type)) {
    // Encoder / encoder-only: bidirectional over the step's own rows, no cache.
    check_kv_rows(key, "key", query.dtype(), rows, p.num_kv_heads, p.head_size);
    check_kv_rows(value, "value", query.dtype(), rows, p.num_kv_heads, p.head_size);
    check_16_byte_rows(key, "the key rows", 2);
    check_16_byte_rows(value, "the value rows", 2);
    FF_CHECK(key.stride(0) == value.stride(0) && key.stride(1) == value.stride(1),
             E::kInvalidArgument, "layer '", layer.name,
             "': key and value rows must have the same strides");
    for (int r = 0; r < md.num_reqs; ++r) {
      const int query_len = md.query_start_loc_host[r + 1] - md.query_start_loc_host[r];
      FF_CHECK(md.seq_lens_host[r] == query_len, E::kInvalidArgument, "layer '", layer.name, "' (",
               to_string(p.attn_type), "): request ", r, " has seq_len ", md.seq_lens_host[r],
               " but ", query_len,
               " tokens; encoder attention has no context, so they must be equal");
    }
    call.k = key;
    call.v = value;
    call.paged = false;
    call.causal = false;
    prefill_.run(call, /*single_token_rows=*/true, stream);
    return;
  }

  check_kv_cache(kv_cache, p.kv_cache_dtype, p.num_kv_heads, p.head_size);
  call.k = kv_cache.select(0, 0);
  call.v = kv_cache.select(0, 1);
  check_16_byte_rows(call.k, "the cache", 3);
  const int block_size = static_cast<int>(call.k.size(1));
  FF_CHECK(block_size > 0 && (block_size & (block_size - 1)) == 0, E::kUnsupported,
           "the paged backend needs a power-of-two block size, got ", block_size);
  call.causal = p.attn_type == AttentionType::kDecoder;

  const bool writes_cache = p.kv_sharing_target_layer_name.empty();
  const bool has_new_kv = key.defined() || value.defined();
  if (p.attn_type == AttentionType::kDecoder && writes_cache) {
    FF_CHECK(has_new_kv, E::kInvalidArgument, "layer '", layer.name,
             "': decoder attention needs this step's key and value");
  }
  if (has_new_kv && writes_cache) {
    check_kv_rows(key, "key", query.dtype(), md.num_slots, p.num_kv_heads, p.head_size);
    check_kv_rows(value, "value", query.dtype(), md.num_slots, p.num_kv_heads, p.head_size);
    kernels::launch_reshape_and_cache(key, value, call.k, call.v, md.slot_mapping, md.num_slots,
                                      layer.k_scale, layer.v_scale, stream);
  }
  decode_.run(call, stream);
  if (md.num_decode_tokens < rows) prefill_.run(call, /*single_token_rows=*/false, stream);
}

class PagedBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "paged"; }
  bool is_mla() const override { return false; }
  GraphSupport graph_support() const override { return GraphSupport::kAlways; }
  bool supports_dcp_prefill() const override { return true; }
  bool accept_output_buffer() const override { return true; }
  bool supports_quant_query_input() const override { return false; }
  std::span<const int> supported_head_sizes() const override { return kernels::kHeadSizes; }
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
    return DecodePolicy::workspace_bytes(p, limits, device);
  }
  std::size_t plan_bytes(const BatchLimits& limits, const DeviceProperties&) const override {
    return PrefillPolicy::plan_bytes(limits);
  }
  void plan(const CommonAttentionMetadata& common, std::span<std::byte> slice) const override {
    PrefillPolicy::plan(common, slice);
  }

  std::unique_ptr<AttentionImpl> make_impl(const AttentionParams& p, DcpGroup dcp) const override {
    check_common_params(*this, p);
    check_dcp(dcp, /*can_return_lse=*/true, name());
    check_positional_features(p, dcp, name());
    for (const auto& why :
         {DecodePolicy::cannot_implement(p), PrefillPolicy::cannot_implement(p)}) {
      FF_CHECK(!why, E::kUnsupported, "backend 'paged': ", why.value_or(""));
    }
    return std::make_unique<PagedImpl>(p, dcp);
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_paged_backend() { return std::make_unique<PagedBackend>(); }

}  // namespace freezeframe
