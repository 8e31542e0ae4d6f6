#include "paged_decode/decode_policy.h"

#include <algorithm>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/device.h"
#include "paged_decode/decode_launch.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

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

/// Rows the decode kernel's grid covers (a CTA per row, split and head group). A graph captured
/// here replays steps of other compositions, so it covers every row; an eager launch stops after
/// the last single-token request's row, and launches nothing for a step of prefills alone: a CTA
/// that only finds its row is not a decode costs the lookup, and a 16k-row step has 131,072 of
/// them (0.15 ms a layer, PERFORMANCE.md).
int rows_to_decode(const AttentionMetadata& md, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FF_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const std::span<const std::int32_t> starts = md.query_start_loc_host;
  if (capture != cudaStreamCaptureStatusNone ||
      starts.size() != static_cast<std::size_t>(md.num_reqs) + 1) {
    return md.num_tokens;
  }
  for (int r = md.num_reqs - 1; r >= 0; --r) {
    if (starts[r + 1] - starts[r] == 1) return starts[r + 1];
  }
  return 0;
}

}  // namespace

std::optional<std::string> DecodePolicy::cannot_implement(const AttentionParams& p) {
  if (p.num_heads > paged_decode::kMaxHeads) {
    return "the decode kernel supports at most " + std::to_string(paged_decode::kMaxHeads) +
           " heads";
  }
  return std::nullopt;
}

std::size_t DecodePolicy::workspace_bytes(const AttentionParams& p, const BatchLimits& limits,
                                          const DeviceProperties& device) {
  return workspace_for(p, limits, DecodeSplitPolicy::for_device(device));
}

DecodePolicy::DecodePolicy(const AttentionParams& params)
    : params_(params),
      heads_per_cta_(heads_per_cta(params.num_heads / params.num_kv_heads)),
      split_(DecodeSplitPolicy::for_current_device()) {
  // The split count follows this kernel's occupancy: read it once here, so that every
  // forward agrees (the workspace is sized for any occupancy). f16 and bf16 queries compile
  // alike. A GPU the build has no code for answers with an error: the policy is still made
  // (spec validation makes one), and the engine refuses such a GPU before it runs anything.
  if (has_gpu()) {
    const DType kv = params.kv_cache_dtype;
    try {
      split_.resident_ctas_per_sm = paged_decode::resident_ctas_per_sm(
          kv == DType::kF16 ? DType::kF16 : DType::kBF16, kv, params.head_size, heads_per_cta_);
    } catch (const Error&) {
      (void)cudaGetLastError();
    }
  }
}

std::size_t DecodePolicy::workspace_bytes(const BatchLimits& limits) const {
  return workspace_for(params_, limits, split_);
}

void DecodePolicy::run(const AttentionCall& call, cudaStream_t stream) const {
  const AttentionParams& p = params_;
  const AttentionLayer& layer = *call.layer;
  const AttentionMetadata& md = *call.md;
  const int rows = rows_to_decode(md, stream);
  if (rows == 0) return;
  const int block_size = static_cast<int>(call.k.size(1));
  // Split by the step's rows, not those decoded: eager and captured steps split alike.
  const int splits = split_.splits(md.num_tokens, p.num_heads / heads_per_cta_,
                                   static_cast<long>(md.block_table_stride) * block_size);
  const SplitWorkspace ws(p, splits, rows);
  FF_CHECK(ws.total == 0 || (layer.workspace.defined() && layer.workspace.is_cuda() &&
                             static_cast<std::size_t>(layer.workspace.span_bytes()) >= ws.total),
           E::kOutOfMemory, "layer '", layer.name, "': the split-KV workspace holds ",
           layer.workspace.defined() ? layer.workspace.span_bytes() : 0, " bytes; ", rows,
           " rows in ", splits, " splits need ", ws.total);
  paged_decode::DecodeParams d;
  fill_attention_io(call, p, d);
  if (splits > 1) {
    auto* base = static_cast<std::uint8_t*>(layer.workspace.data());
    d.partial_out = reinterpret_cast<float*>(base);
    d.partial_lse = reinterpret_cast<float*>(base + ws.partial_lse);
  }
  d.num_reqs = md.num_reqs;
  d.num_rows = rows;
  d.num_splits = splits;
  paged_decode::launch_decode(d, call.query.dtype(), call.k.dtype(), p.head_size, heads_per_cta_,
                              stream);
  if (splits > 1) paged_decode::launch_combine(d, call.query.dtype(), p.head_size, stream);
}

}  // namespace freezeframe
