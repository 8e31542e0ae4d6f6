#pragma once
// The tensor-core MLA attention kernel, for decode rows and (absorbed too) any others: the absorbed
// form, each query head a 576-wide row (512 latent + 64 rotary) against the paged latent cache
// [blocks, block_size, 576], whose first 512 values are also the values. The heads of a row are the
// rows of one mma tile (16 or 32 heads a CTA), so the cache is read once per CTA for all of them.
// Split-KV with LSE: each split writes a normalised partial state and a combine merges them (as the
// paged decode kernels).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "freezeframe/base/dtype.h"
#include "freezeframe/core/device_properties.h"
#include "paged_decode/split_policy.h"

namespace freezeframe::mla_decode {

inline constexpr int kLatent = 512;  ///< the values: the latent's width
inline constexpr int kRope = 64;
inline constexpr int kQk = kLatent + kRope;  ///< the keys: latent and rotary part
inline constexpr int kMaxSplits = 64;

/// Without query_start_loc, row r is decode request r (one new token) and attends its
/// seq_lens[r] cached positions, all of them: the new latent is cached before attention, and
/// under decode context parallelism seq_lens count the rank's shard, all of it at or before
/// the row's position. With it, any step's rows: row r belongs to the last request whose
/// query_start_loc is ≤ r and attends the cached positions up to its own (causal; over a DCP
/// shard the shard's first dcp_shard_tokens(position + 1)); rows from
/// query_start_loc[num_reqs] on are padding (zeros, LSE −inf).
struct MlaDecodeParams {
  const float* q = nullptr;  ///< [rows, heads, 576] f32 (the absorbed query)
  std::int64_t q_stride_row = 0, q_stride_head = 0;
  /// [blocks, block_size, 576] bf16, f16, or fp8_e4m3 (values times cache_scale), unit inner
  /// stride
  const void* cache = nullptr;
  std::int64_t cache_stride_block = 0, cache_stride_token = 0;
  const std::int32_t* block_table = nullptr;
  int block_table_stride = 0;
  int block_size = 0;
  const std::int32_t* seq_lens = nullptr;
  float* out = nullptr;  ///< [rows, heads, 512] f32
  std::int64_t out_stride_row = 0, out_stride_head = 0;
  float* lse = nullptr;  ///< [rows, heads] natural log (−inf for an empty row); may be null
  std::int64_t lse_stride_row = 0;
  float* partial_out = nullptr;  ///< [splits, rows, heads, 512] f32, when num_splits > 1
  float* partial_lse = nullptr;  ///< [splits, rows, heads]
  int num_rows = 0, num_heads = 0, num_splits = 1;
  float scale = 1.0f;
  float cache_scale = 1.0f;  ///< an fp8 cache's: what its values are multiplied by
  const std::int32_t* query_start_loc = nullptr;  ///< [num_reqs + 1], device; null: decodes
  int num_reqs = 0;
  /// Under DCP (dcp_world > 1, with query_start_loc): each request's first new position.
  const std::int32_t* first_positions = nullptr;
  int dcp_world = 1, dcp_rank = 0, dcp_interleave = 1;
};

/// Heads one CTA computes for `num_heads` heads (16 or 32).
int heads_per_cta(int num_heads);

/// How many KV splits the kernel takes on `device` (the current one when null): the paged
/// decode's policy for a kernel of one CTA an SM. A split count depends on a step's row count
/// and the deployment's longest sequence only (graph-stable); each split's share of a row is
/// its actual length divided evenly, read by the kernel.
DecodeSplitPolicy split_policy(const DeviceProperties* device);
/// The splits of a step of `rows` rows (`max_seq_tokens`: the block table's row length × the
/// block size).
int split_count(const DecodeSplitPolicy& policy, int num_heads, int rows, long max_seq_tokens);
/// The split-KV scratch any step of at most `max_rows` rows may need (MlaDecodeWorkspace).
std::size_t workspace_bytes(const DecodeSplitPolicy& policy, int num_heads, int max_rows,
                            long max_seq_tokens);

/// The kernel over p.num_rows rows, then, with splits, their combine. `cache_dtype` bf16 or f16
/// (the mma's type), or fp8_e4m3 (widened to bf16).
void launch_mla_decode(const MlaDecodeParams& p, DType cache_dtype, cudaStream_t stream);

/// Split-KV scratch for `splits` splits of `rows` rows: partial outputs, then LSEs at
/// partial_lse_offset (bytes).
struct MlaDecodeWorkspace {
  std::size_t partial_lse_offset = 0, total = 0;
  MlaDecodeWorkspace(int num_heads, int splits, int rows);
};

}  // namespace freezeframe::mla_decode
