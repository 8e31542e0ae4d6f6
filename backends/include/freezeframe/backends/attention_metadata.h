#pragma once
// Per-step attention metadata. The serving loop describes a batch on the host
// (CommonAttentionMetadata); it is staged and uploaded into persistent device buffers (an
// engine's one staged image, or a MetadataBuilder's own), and AttentionMetadata, a plain
// struct of device pointers and sizes, is what the kernels read.
//
// Batch order: decode requests first (one new token each), then prefill requests.

#include <cstdint>
#include <span>

namespace freezeframe {

/// Host description of one step.
struct CommonAttentionMetadata {
  std::span<const std::int32_t> query_start_loc;  ///< [num_reqs + 1] cumulative new tokens, from 0
  std::span<const std::int32_t> seq_lens;         ///< [num_reqs] context + new tokens (KV length)
  std::span<const std::int32_t> block_table;      ///< [num_reqs × block_table_stride] block ids
  int block_table_stride = 0;                     ///< row length of block_table
  /// Instead of block_table (left empty): one span of block ids per request, each at least
  /// ceil(seq_len / block size) long, read in place (a serving loop's own per-request
  /// lists); block_table_stride is then the most blocks any request needs.
  std::span<const std::span<const std::int32_t>> block_table_rows;
  std::span<const std::int64_t> slot_mapping;  ///< [rows of K/V written] cache slot; −1 skips
  int num_tokens = 0;   ///< query rows, padding included (≥ query_start_loc.back())
  int num_decodes = 0;  ///< leading requests with exactly one new token
  /// Under decode context parallelism, where seq_lens count this rank's keys only (a shard,
  /// which may hold fewer keys than the request's new tokens, or none): each request's tokens
  /// before its new ones in the whole sequence, the position of its first new token, which a
  /// prefill row's causal mask over the shard needs (dcp_shard.h). Given under DCP; empty
  /// without it (the position is then seq_len − new tokens).
  std::span<const std::int32_t> dcp_context_lens;
};

/// Sizes the persistent device buffers are made for (the largest shape a step may have).
struct BatchLimits {
  int max_num_reqs = 0;
  int max_num_tokens = 0;      ///< query rows and cache-write rows per step
  int max_blocks_per_req = 0;  ///< block table row length (max model length / block size)
  int block_size = 0;
  /// Σ seq_len over the prefill requests of a step: bounds workspaces that expand a context
  /// (the MLA prefill). 0 = max_num_tokens.
  std::int64_t max_prefill_context_tokens = 0;
  /// KV-cache blocks in the pool: staging refuses a block id outside [0, num_blocks), which a
  /// kernel would follow out of the cache. 0 = ids not checked.
  std::int32_t num_blocks = 0;
};

/// Device view of one step, valid until the next step is staged over it.
struct AttentionMetadata {
  const std::int32_t* query_start_loc = nullptr;  ///< [num_reqs + 1]
  const std::int32_t* seq_lens = nullptr;         ///< [num_reqs]
  const std::int32_t* seq_start_loc = nullptr;    ///< [num_reqs + 1] cumulative seq_lens
  const std::int32_t* block_table = nullptr;      ///< [num_reqs × block_table_stride]
  int block_table_stride = 0;
  const std::int64_t* slot_mapping = nullptr;  ///< [num_slots]
  int num_slots = 0;
  int num_reqs = 0;
  int num_tokens = 0;
  int num_decodes = 0;
  int num_decode_tokens = 0;
  /// The backend's host-planned data for this step (AttentionBackend::plan), on the device;
  /// null when it plans none.
  const void* plan = nullptr;
  /// Host copies for paths that run eagerly and need sizes (never used to shape a launch that
  /// a graph may capture). Valid until the next build.
  std::span<const std::int32_t> query_start_loc_host;
  std::span<const std::int32_t> seq_lens_host;
};

}  // namespace freezeframe
