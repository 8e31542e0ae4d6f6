// The reference MLA backend.
//
// Data flow of one forward (all intermediates f32 in the layer's workspace):
//   q      = hidden_states_or_cq · W_UQᵀ                      [T, H, nope + rope]
//   rotate q_pe and k_pe at each token's position; cache ← [kv_c, k_pe]
//   decode rows (absorbed):  q_abs = [W_UK[h]ᵀ q_nope, q_pe]   [T_dec, H, R + rope]
//                            o_lat = attention(q_abs, latent cache as keys, kv_c as values)
//                            out   = W_UV[h] · o_lat
//   prefill rows (expanded): k = [W_UK[h] c_j, k_pe_j], v = W_UV[h] c_j for every context
//                            position, then causal attention of q over k, v → out.
// Under decode context parallelism the cache holds the rank's shard of each sequence and the
// positions (rotary embedding, the causal mask over the shard) come from the plan hook, each
// request's first new position; the LSE lets the engine merge the ranks' partial outputs.
// Both paths compute the same function; decode reads R + rope values per position instead
// of H·(nope + rope + v).
//
// Backend "mla" is this one with every row absorbed (prefill rows too: 576 + 512 multiplies a
// position and head instead of 192 + 128, but the latent read once for all heads) and run on
// tensor cores: the attention on mla_decode/mla_decode.h's kernel (DeepSeek's 512 + 64 latent,
// split-KV), the projections (the query's, its absorption, the output's up-projection) on
// mla_decode/tensor_core_projection.h's. The rotary embedding and the cache write are the
// reference's.

#include <algorithm>
#include <array>
#include <cmath>

#include "freezeframe/base/error.h"
#include "mla_decode/mla_decode.h"
#include "mla_decode/tensor_core_projection.h"
#include "reference/launch.h"
#include "reference/mla_launch.h"
#include "reference/positions_plan.h"
#include "reference/reference_backends.h"
#include "validate.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

constexpr std::array<int, 4> kKvLoraRanks = {64, 128, 256, 512};
constexpr std::array<int, 2> kRopeDims = {32, 64};
constexpr std::array<int, 8> kLatentSizes = {96, 128, 160, 192, 288, 320, 544, 576};
constexpr std::array<int, 1> kTensorCoreLatentSizes = {mla_decode::kQk};
constexpr std::array<DType, 2> kCacheDTypes = {DType::kBF16, DType::kF16};
constexpr std::array<DType, 3> kTensorCoreCacheDTypes = {DType::kBF16, DType::kF16,
                                                         DType::kFp8E4M3};

/// The tensor-core decode kernel's split-KV scratch for any step within `limits`.
std::size_t split_bytes(const MlaParams& p, const BatchLimits& limits,
                        const DecodeSplitPolicy& policy) {
  const long longest =
      static_cast<long>(limits.max_blocks_per_req) * std::max(limits.block_size, 1);
  return mla_decode::workspace_bytes(policy, p.num_heads, limits.max_num_tokens, longest);
}

/// Byte offsets of the workspace regions for `tokens` query rows and `context` expanded
/// positions. Token-sized regions come first so their addresses depend on the row count only.
struct MlaWorkspace {
  std::size_t q, q_abs, o_lat, k_exp, v_exp, total;

  static MlaWorkspace layout(const MlaParams& p, std::int64_t tokens, std::int64_t context) {
    const auto f = static_cast<std::int64_t>(sizeof(float));
    const std::int64_t h = p.num_heads;
    MlaWorkspace w{};
    std::int64_t at = 0;
    auto take = [&](std::int64_t elements) {
      const auto offset = static_cast<std::size_t>(at);
      at += (elements * f + 255) / 256 * 256;
      return offset;
    };
    w.q = take(tokens * h * (p.qk_nope_head_dim + p.qk_rope_head_dim));
    w.q_abs = take(tokens * h * p.latent_size());
    w.o_lat = take(tokens * h * p.kv_lora_rank);
    w.k_exp = take(context * h * (p.qk_nope_head_dim + p.qk_rope_head_dim));
    w.v_exp = take(context * h * p.v_head_dim);
    w.total = static_cast<std::size_t>(at);
    return w;
  }

  /// The whole workspace for batches within `limits`: its query rows, and the prefill context
  /// they may expand (max_prefill_context_tokens, else the longer of a step and a sequence;
  /// none where every row is absorbed).
  static std::size_t bytes(const MlaParams& p, const BatchLimits& limits, bool expands) {
    const std::int64_t context =
        !expands ? 0
        : limits.max_prefill_context_tokens > 0
            ? limits.max_prefill_context_tokens
            : std::max<std::int64_t>(limits.max_num_tokens,
                                     std::int64_t(limits.max_blocks_per_req) * limits.block_size);
    return layout(p, limits.max_num_tokens, context).total;
  }
};

TensorView f32_view(const TensorView& workspace, std::size_t offset,
                    std::initializer_list<std::int64_t> shape) {
  return TensorView(static_cast<std::uint8_t*>(workspace.data()) + offset, DType::kF32, shape,
                    workspace.device());
}

class ReferenceMlaImpl final : public MlaImpl {
 public:
  ReferenceMlaImpl(const MlaParams& params, const MlaWeights& weights, DcpGroup dcp,
                   bool tensor_cores)
      : MlaImpl(params, dcp),
        weights_(weights),
        tensor_cores_(tensor_cores),
        split_(mla_decode::split_policy(nullptr)) {}

  bool can_return_lse_for_decode() const override { return true; }

  std::size_t workspace_bytes(const BatchLimits& limits) const override {
    const std::size_t reference = MlaWorkspace::bytes(params(), limits, !tensor_cores_);
    if (!tensor_cores_) return reference;
    return (reference + 255) / 256 * 256 + split_bytes(params(), limits, split_);
  }

  void forward(const AttentionLayer& layer, const TensorView& cq, const TensorView& kv_c,
               const TensorView& k_pe, const TensorView& kv_cache, const AttentionMetadata& md,
               const TensorView& output, cudaStream_t stream, const TensorView& lse_ln) override;

 private:
  /// A projection on the backend's kernels: tensor cores for "mla", else the reference's.
  void project(const reference::Projection& projection, cudaStream_t stream) const {
    if (tensor_cores_) {
      mla_decode::launch_tensor_core_projection(projection, stream);
    } else {
      reference::launch_projection(projection, stream);
    }
  }

  /// Every row's attention on tensor cores, absorbed: q_abs against the latent cache → o_lat
  /// (and the LSE), each row causal over its request's positions (under DCP, its shard's).
  void absorbed_attention(const TensorView& q_abs, const TensorView& o_lat,
                          const TensorView& kv_cache, float cache_scale,
                          const AttentionMetadata& md, const std::int32_t* first_positions,
                          const TensorView& workspace, std::size_t scratch_offset,
                          const TensorView& lse_ln, cudaStream_t stream) const;

  MlaWeights weights_;
  bool tensor_cores_;
  DecodeSplitPolicy split_;
};

void check_rows(const TensorView& t, const char* what, DType dtype, int rows, int width) {
  FF_CHECK(t.defined() && t.is_cuda(), E::kInvalidArgument, what, " must be a device tensor");
  FF_CHECK(t.dtype() == dtype, E::kInvalidArgument, what, " is ", name_of(t.dtype()), ", expected ",
           name_of(dtype));
  FF_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == width && t.stride(1) == 1,
           E::kInvalidArgument, what, " has shape ", t.describe(), ", expected [", rows, ", ",
           width, "] with unit stride in the last dimension");
}

void ReferenceMlaImpl::forward(const AttentionLayer& layer, const TensorView& cq,
                               const TensorView& kv_c, const TensorView& k_pe,
                               const TensorView& kv_cache, const AttentionMetadata& md,
                               const TensorView& output, cudaStream_t stream,
                               const TensorView& lse_ln) {
  const MlaParams& p = params();
  const int rows = md.num_tokens;
  const DType dtype = weights_.q_proj.dtype();
  check_rows(cq, "hidden_states_or_cq", dtype, rows, p.q_lora_rank);
  check_rows(kv_c, "kv_c_normed", dtype, rows, p.kv_lora_rank);
  check_rows(k_pe, "k_pe", dtype, rows, p.qk_rope_head_dim);
  FF_CHECK(md.num_slots == rows, E::kInvalidArgument,
           "MLA writes one latent per query row: "
           "slot_mapping has ",
           md.num_slots, " entries for ", rows, " rows");
  FF_CHECK(kv_cache.defined() && kv_cache.is_cuda() && kv_cache.dtype() == p.kv_cache_dtype &&
               kv_cache.dim() == 3 && kv_cache.size(2) == p.latent_size() &&
               kv_cache.stride(2) == 1,
           E::kInvalidArgument, "kv_cache must be a device ", name_of(p.kv_cache_dtype),
           " tensor [num_blocks, block_size, ", p.latent_size(), "], got ",
           kv_cache.defined() ? kv_cache.describe() : "nothing");
  const TensorView out = output_as_3d(output, dtype, rows, p.num_heads, p.v_head_dim);
  check_lse(lse_ln, rows, p.num_heads);

  // The reference expands the latent for its prefill rows; the tensor cores absorb every row.
  std::int64_t context = 0;
  if (!tensor_cores_) {
    for (int r = md.num_decodes; r < md.num_reqs; ++r) context += md.seq_lens_host[r];
  }
  const MlaWorkspace ws = MlaWorkspace::layout(p, rows, context);
  FF_CHECK(layer.workspace.defined() && layer.workspace.is_cuda() &&
               static_cast<std::size_t>(layer.workspace.span_bytes()) >= ws.total,
           E::kOutOfMemory, "layer '", layer.name, "': the MLA workspace holds ",
           layer.workspace.defined() ? layer.workspace.span_bytes() : 0, " bytes; this step (",
           rows, " rows, ", context, " prefill context positions) needs ", ws.total);

  const int h = p.num_heads, nope = p.qk_nope_head_dim, rope = p.qk_rope_head_dim;
  const int rank = p.kv_lora_rank, v = p.v_head_dim;
  const TensorView q = f32_view(layer.workspace, ws.q, {rows, h, nope + rope});

  // q = cq · W_UQᵀ, then rotary embedding on q_pe and k_pe, and the latent cache write.
  reference::Projection q_proj;
  q_proj.x = cq.data();
  q_proj.x_dtype = dtype;
  q_proj.x_stride_row = cq.stride(0);
  q_proj.w = weights_.q_proj.data();
  q_proj.w_dtype = dtype;
  q_proj.w_stride_n = p.q_lora_rank;
  q_proj.out = q.data();
  q_proj.out_dtype = DType::kF32;
  q_proj.out_stride_row = std::int64_t(h) * (nope + rope);
  q_proj.rows = rows;
  q_proj.n_out = h * (nope + rope);
  q_proj.k = p.q_lora_rank;
  project(q_proj, stream);
  // Under DCP seq_lens count this rank's shard: positions come from the plan, and every row
  // is masked over the shard by its position (reference/positions_plan.h).
  const auto* first_positions =
      dcp_world_size() > 1 ? static_cast<const std::int32_t*>(md.plan) : nullptr;
  reference::launch_mla_rope_and_cache(p, q, kv_c, k_pe, kv_cache, md, first_positions,
                                       layer.k_scale, stream);

  reference::AttentionLaunch base;
  if (dcp_world_size() > 1) {
    base.first_positions = first_positions;
    base.dcp = dcp_group();
  }
  base.lse_ln = lse_ln;
  base.query_start_loc = md.query_start_loc;
  base.seq_lens = md.seq_lens;
  base.num_heads = h;
  base.scale = p.scale;
  base.causal = true;

  // Decode rows (on tensor cores, every row): absorbed query against the latent cache (one
  // shared "KV head").
  const int decode_rows = md.num_decode_tokens;
  const int absorbed_rows = tensor_cores_ ? rows : decode_rows;
  if (absorbed_rows > 0) {
    const TensorView q_abs = f32_view(layer.workspace, ws.q_abs, {rows, h, p.latent_size()});
    const TensorView o_lat = f32_view(layer.workspace, ws.o_lat, {rows, h, rank});
    if (tensor_cores_) {
      mla_decode::launch_tensor_core_absorb_query(p, q, weights_.kv_b_proj, q_abs, rows, stream);
      absorbed_attention(q_abs, o_lat, kv_cache, layer.k_scale, md, first_positions,
                         layer.workspace, (ws.total + 255) / 256 * 256, lse_ln, stream);
    } else {
      reference::launch_mla_absorb_query(p, q, weights_.kv_b_proj, q_abs, decode_rows, stream);
      reference::AttentionLaunch launch = base;
      launch.query = q_abs;
      launch.output = o_lat;
      launch.num_rows = decode_rows;
      launch.req_end = md.num_decodes;
      launch.num_kv_heads = 1;
      launch.head_size_qk = p.latent_size();
      launch.head_size_v = rank;
      reference::PagedSource latent;
      latent.k = latent.v = kv_cache.data();
      latent.dtype = kv_cache.dtype();
      latent.stride_block = kv_cache.stride(0);
      latent.stride_token = kv_cache.stride(1);
      latent.block_table = md.block_table;
      latent.block_table_stride = md.block_table_stride;
      latent.block_size = static_cast<int>(kv_cache.size(1));
      reference::launch_attention(launch, latent, stream);
    }

    reference::Projection up;  // out[t, h] = W_UV[h] · o_lat[t, h]
    up.x = o_lat.data();
    up.x_dtype = DType::kF32;
    up.x_stride_batch = rank;
    up.x_stride_row = std::int64_t(h) * rank;
    up.w = static_cast<const std::uint8_t*>(weights_.kv_b_proj.data()) +
           std::int64_t(nope) * rank * size_of(dtype);
    up.w_dtype = dtype;
    up.w_stride_batch = std::int64_t(nope + v) * rank;
    up.w_stride_n = rank;
    up.out = out.data();
    up.out_dtype = dtype;
    up.out_stride_batch = v;
    up.out_stride_row = std::int64_t(h) * v;
    up.batch = h;
    up.rows = absorbed_rows;
    up.n_out = v;
    up.k = rank;
    project(up, stream);
  }

  // Prefill rows (and padding rows, which come out as zeros): expand the latent.
  if (!tensor_cores_ && rows > decode_rows) {
    const TensorView k_exp = f32_view(layer.workspace, ws.k_exp, {context, h, nope + rope});
    const TensorView v_exp = f32_view(layer.workspace, ws.v_exp, {context, h, v});
    reference::launch_mla_expand_latent(p, kv_cache, weights_.kv_b_proj, md, k_exp, v_exp, stream);
    reference::AttentionLaunch launch = base;
    launch.query = q;
    launch.output = out;
    launch.row_begin = decode_rows;
    launch.num_rows = rows - decode_rows;
    launch.req_begin = md.num_decodes;
    launch.req_end = md.num_reqs;
    launch.num_kv_heads = h;
    launch.head_size_qk = nope + rope;
    launch.head_size_v = v;
    reference::ContiguousSource source{k_exp, v_exp, md.seq_start_loc, md.num_decodes};
    reference::launch_attention(launch, source, stream);
  }
}

void ReferenceMlaImpl::absorbed_attention(const TensorView& q_abs, const TensorView& o_lat,
                                          const TensorView& kv_cache, float cache_scale,
                                          const AttentionMetadata& md,
                                          const std::int32_t* first_positions,
                                          const TensorView& workspace, std::size_t scratch_offset,
                                          const TensorView& lse_ln, cudaStream_t stream) const {
  const MlaParams& p = params();
  const int rows = md.num_tokens;
  const int block_size = static_cast<int>(kv_cache.size(1));
  // Split by the step's rows: a graph's launch is right for any step it replays.
  const int splits = mla_decode::split_count(split_, p.num_heads, md.num_tokens,
                                             static_cast<long>(md.block_table_stride) * block_size);
  const mla_decode::MlaDecodeWorkspace scratch(p.num_heads, splits, rows);
  FF_CHECK(static_cast<std::size_t>(workspace.span_bytes()) >= scratch_offset + scratch.total,
           E::kOutOfMemory, "the MLA workspace holds ", workspace.span_bytes(), " bytes; ", rows,
           " rows in ", splits, " splits need ", scratch_offset + scratch.total);
  mla_decode::MlaDecodeParams d;
  d.q = static_cast<const float*>(q_abs.data());
  d.q_stride_row = q_abs.stride(0);
  d.q_stride_head = q_abs.stride(1);
  d.cache = kv_cache.data();
  d.cache_stride_block = kv_cache.stride(0);
  d.cache_stride_token = kv_cache.stride(1);
  d.block_table = md.block_table;
  d.block_table_stride = md.block_table_stride;
  d.block_size = block_size;
  d.seq_lens = md.seq_lens;
  d.out = static_cast<float*>(o_lat.data());
  d.out_stride_row = o_lat.stride(0);
  d.out_stride_head = o_lat.stride(1);
  if (lse_ln.defined()) {
    d.lse = static_cast<float*>(lse_ln.data());
    d.lse_stride_row = lse_ln.stride(0);
  }
  if (splits > 1) {
    auto* base = static_cast<std::uint8_t*>(workspace.data()) + scratch_offset;
    d.partial_out = reinterpret_cast<float*>(base);
    d.partial_lse = reinterpret_cast<float*>(base + scratch.partial_lse_offset);
  }
  d.num_rows = rows;
  d.num_heads = p.num_heads;
  d.num_splits = splits;
  d.scale = p.scale;
  d.cache_scale = cache_scale;
  d.query_start_loc = md.query_start_loc;
  d.num_reqs = md.num_reqs;
  if (dcp_world_size() > 1) {
    d.first_positions = first_positions;
    d.dcp_world = dcp_group().world_size;
    d.dcp_rank = dcp_group().rank;
    d.dcp_interleave = dcp_group().interleave_size;
  }
  mla_decode::launch_mla_decode(d, p.kv_cache_dtype, stream);
}

template <std::size_t N>
std::string list(const std::array<int, N>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

void check_weight(const TensorView& w, const char* what, std::int64_t rows, std::int64_t cols) {
  FF_CHECK(w.defined() && w.is_cuda() && w.is_contiguous(), E::kInvalidArgument, what,
           " must be a contiguous device tensor");
  FF_CHECK(w.dtype() == DType::kBF16 || w.dtype() == DType::kF16, E::kUnsupported, what,
           " must be bf16 or f16, got ", name_of(w.dtype()));
  FF_CHECK(w.dim() == 2 && w.size(0) == rows && w.size(1) == cols, E::kInvalidArgument, what,
           " has shape ", w.describe(), ", expected [", rows, ", ", cols, "]");
}

class ReferenceMlaBackend final : public AttentionBackend {
 public:
  /// `tensor_cores`: the decode attention and the projections on mla_decode's tensor-core
  /// kernels (backend "mla").
  explicit ReferenceMlaBackend(bool tensor_cores) : tensor_cores_(tensor_cores) {}

  std::string_view name() const override { return tensor_cores_ ? "mla" : "reference_mla"; }
  bool is_mla() const override { return true; }
  // Decode and prefill rows take different launches, split by the step's decode count.
  GraphSupport graph_support() const override { return GraphSupport::kUniformSingleTokenDecode; }
  bool accept_output_buffer() const override { return true; }
  bool supports_quant_query_input() const override { return false; }
  bool supports_dcp_prefill() const override { return true; }
  std::size_t plan_bytes(const BatchLimits& limits, const DeviceProperties&) const override {
    return reference::positions_plan_bytes(limits);
  }
  void plan(const CommonAttentionMetadata& common, std::span<std::byte> slice) const override {
    reference::write_positions_plan(common, slice);
  }
  std::span<const int> supported_head_sizes() const override {
    if (tensor_cores_) return kTensorCoreLatentSizes;
    return kLatentSizes;
  }
  std::span<const DType> supported_kv_cache_dtypes() const override {
    if (tensor_cores_) return kTensorCoreCacheDTypes;
    return kCacheDTypes;
  }

  std::vector<std::int64_t> kv_cache_shape(std::int64_t num_blocks, int block_size,
                                           int num_kv_heads, int head_size, DType) const override {
    FF_CHECK(num_kv_heads == 1, E::kInvalidArgument,
             "an MLA cache holds one latent per position: num_kv_heads must be 1, got ",
             num_kv_heads);
    return {num_blocks, block_size, head_size};
  }
  std::vector<int> kv_cache_stride_order() const override { return {0, 1, 2}; }

  std::size_t mla_workspace_bytes(const MlaParams& p, const BatchLimits& limits,
                                  const DeviceProperties& device) const override {
    const std::size_t reference = MlaWorkspace::bytes(p, limits, !tensor_cores_);
    if (!tensor_cores_) return reference;
    return (reference + 255) / 256 * 256 +
           split_bytes(p, limits, mla_decode::split_policy(&device));
  }

  std::unique_ptr<MlaImpl> make_mla_impl(const MlaParams& p, const MlaWeights& w,
                                         DcpGroup dcp) const override {
    FF_CHECK(p.num_heads > 0 && p.num_heads <= 256, E::kInvalidArgument,
             "num_heads must be in [1, 256], got ", p.num_heads);
    FF_CHECK(p.q_lora_rank > 0, E::kInvalidArgument, "q_lora_rank must be positive, got ",
             p.q_lora_rank);
    FF_CHECK(
        std::find(kKvLoraRanks.begin(), kKvLoraRanks.end(), p.kv_lora_rank) != kKvLoraRanks.end(),
        E::kUnsupported, "backend '", name(), "' does not support kv_lora_rank ", p.kv_lora_rank,
        "; supported: ", list(kKvLoraRanks));
    FF_CHECK(std::find(kRopeDims.begin(), kRopeDims.end(), p.qk_rope_head_dim) != kRopeDims.end(),
             E::kUnsupported, "backend '", name(), "' does not support qk_rope_head_dim ",
             p.qk_rope_head_dim, "; supported: ", list(kRopeDims));
    FF_CHECK(p.qk_nope_head_dim > 0 && p.qk_nope_head_dim <= 512 && p.v_head_dim > 0 &&
                 p.v_head_dim <= 256,
             E::kUnsupported, "backend '", name(), "' needs qk_nope_head_dim in [1, 512] and ",
             "v_head_dim in [1, 256], got ", p.qk_nope_head_dim, " and ", p.v_head_dim);
    FF_CHECK(supports_kv_cache_dtype(p.kv_cache_dtype), E::kUnsupported, "backend '", name(),
             "' keeps the latent cache in ",
             tensor_cores_ ? "bf16, f16 or fp8_e4m3" : "bf16 or f16", ", got ",
             name_of(p.kv_cache_dtype));
    FF_CHECK(std::isfinite(p.scale) && p.scale > 0.0f, E::kInvalidArgument,
             "scale must be positive and finite, got ", p.scale);
    FF_CHECK(std::isfinite(p.rope_theta) && p.rope_theta > 0.0f, E::kInvalidArgument,
             "rope_theta must be positive and finite, got ", p.rope_theta);
    FF_CHECK(p.rope_inv_freq.empty() ||
                 static_cast<int>(p.rope_inv_freq.size()) == p.qk_rope_head_dim / 2,
             E::kInvalidArgument, "rope_inv_freq has ", p.rope_inv_freq.size(), " frequencies for ",
             p.qk_rope_head_dim / 2, " rotary pairs");
    for (const float f : p.rope_inv_freq) {
      FF_CHECK(std::isfinite(f) && f > 0.0f, E::kInvalidArgument,
               "rope_inv_freq must be positive and finite, got ", f);
    }
    FF_CHECK(std::isfinite(p.rope_scale) && p.rope_scale > 0.0f, E::kInvalidArgument,
             "rope_scale must be positive and finite, got ", p.rope_scale);
    check_weight(w.q_proj, "q_proj",
                 std::int64_t(p.num_heads) * (p.qk_nope_head_dim + p.qk_rope_head_dim),
                 p.q_lora_rank);
    check_weight(w.kv_b_proj, "kv_b_proj",
                 std::int64_t(p.num_heads) * (p.qk_nope_head_dim + p.v_head_dim), p.kv_lora_rank);
    // An fp8 latent cache (mla) goes with weights of either 16-bit type.
    FF_CHECK(w.q_proj.dtype() == w.kv_b_proj.dtype() &&
                 (w.kv_b_proj.dtype() == p.kv_cache_dtype || p.kv_cache_dtype == DType::kFp8E4M3),
             E::kUnsupported, "backend '", name(), "' needs q_proj, kv_b_proj and the latent ",
             "cache in one dtype, got ", name_of(w.q_proj.dtype()), ", ",
             name_of(w.kv_b_proj.dtype()), " and ", name_of(p.kv_cache_dtype));
    FF_CHECK(!tensor_cores_ ||
                 (p.kv_lora_rank == mla_decode::kLatent && p.qk_rope_head_dim == mla_decode::kRope),
             E::kUnsupported, "backend '", name(), "' decodes DeepSeek's latent of ",
             mla_decode::kLatent, " + ", mla_decode::kRope, " values; got kv_lora_rank ",
             p.kv_lora_rank, " and qk_rope_head_dim ", p.qk_rope_head_dim,
             " (backend 'reference_mla' takes other sizes)");
    check_dcp(dcp, /*can_return_lse=*/true, name());
    return std::make_unique<ReferenceMlaImpl>(p, w, dcp, tensor_cores_);
  }

 private:
  bool tensor_cores_;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_reference_mla_backend() {
  return std::make_unique<ReferenceMlaBackend>(/*tensor_cores=*/false);
}

std::unique_ptr<AttentionBackend> make_mla_backend() {
  return std::make_unique<ReferenceMlaBackend>(/*tensor_cores=*/true);
}

}  // namespace freezeframe
