#pragma once
// StepBatch: one serving-loop step as the caller describes it, its validation against the
// deployment, and the host metadata the attention builders upload (padded to a captured
// shape when a graph runs it).
//
// Note [Padding a step]: a graph captured for N rows and R requests replays with the real
// batch padded to that shape. Padded rows get cache slot −1 (no cache write) and belong to no
// request; padded requests have no new tokens (query_start_loc stays flat) and sequence length
// 0, so every kernel sees an empty request. Outputs of padded rows are not part of the result.

#include <cstdint>
#include <span>
#include <vector>

#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/engine/runtime/sampler.h"
#include "freezeframe/engine/spec/deployment.h"

namespace freezeframe {

struct StepRequest {
  std::int32_t query_len = 0;               ///< new tokens this step
  std::int32_t seq_len = 0;                 ///< context + new tokens
  std::span<const std::int32_t> block_ids;  ///< the request's cache blocks, in order
};

struct StepBatch {
  std::vector<StepRequest> requests;  ///< single-token decodes first
  /// Cache slot of each new token; empty = derived from the block tables.
  std::span<const std::int64_t> slot_mapping;
  /// Token id of each new token, request by request; empty = token 0 everywhere (benchmarks).
  std::span<const std::int32_t> token_ids;
  /// How each request's next token is drawn, when the engine samples
  /// (EngineOptions::sample_tokens); empty = greedy for every request.
  std::span<const SamplingParams> sampling;
};

/// The shape the dispatcher needs.
struct StepShape {
  int num_tokens = 0;
  int num_reqs = 0;
  int num_decodes = 0;
  bool uniform_decode = false;  ///< every request a single-token decode
};

/// Checks `batch` against `limits` and throws kInvalidArgument naming the request and field at
/// the first problem: counts over the scheduler limits, query_len < 1 or > seq_len, seq_len
/// over max_model_len, decodes not first, too few blocks or block ids outside the pool, a
/// given slot mapping that disagrees with the block tables, token ids of the wrong count or
/// outside the vocabulary, sampling parameters of the wrong count or out of range. With
/// `check_block_ids` false, whether the ids lie in the pool is left to the staging (a
/// MetadataBuilder with BatchLimits::num_blocks checks the rows it writes, and so only the rows
/// that changed since the last step).
[[nodiscard]] StepShape validate_step(const StepBatch& batch, const DeploymentLimits& limits,
                                      bool check_block_ids = true);
/// The same under decode context parallelism: the block tables are the scheduler's virtual
/// blocks (`dcp.virtual_block_size()` positions each, DcpSharding), and the slots are each
/// rank's own, so a step may not give a slot mapping when dcp.world_size > 1.
[[nodiscard]] StepShape validate_step(const StepBatch& batch, const DeploymentLimits& limits,
                                      const DcpSharding& dcp, bool check_block_ids = true);

/// Host metadata of a validated step (`shape` is what validate_step said of it), padded to
/// `padded_tokens` rows and `padded_reqs` requests (see Note [Padding a step]); its spans stay
/// valid while it and the batch live. The block table is the batch's own per-request lists,
/// by row (nothing copied).
class StepMetadata {
 public:
  StepMetadata() = default;
  StepMetadata(const StepBatch& batch, const StepShape& shape, int block_size, int padded_tokens,
               int padded_reqs) {
    assign(batch, shape, block_size, padded_tokens, padded_reqs);
  }
  /// Rebuilds it for another step, reusing its memory (the serving loop's steady state).
  void assign(const StepBatch& batch, const StepShape& shape, int block_size, int padded_tokens,
              int padded_reqs);
  /// The step as DCP rank `dcp_rank` of `dcp` attends it (validate_step with `dcp` said the
  /// shape): every query, each request's sequence length the positions this rank holds (its
  /// shard, new tokens included: the attention's partial output and LSE are merged across
  /// ranks), the virtual block tables as given (each rank keeps the same ids in its own pool,
  /// where its positions of a virtual block fill the block of that id in order), a new token's
  /// slot on this rank or −1 where another rank holds it, and (dcp.world_size > 1) each request's
  /// context length in the whole sequence, by which a prefill row's causal mask finds the
  /// shard's keys before it (CommonAttentionMetadata::dcp_context_lens).
  void assign(const StepBatch& batch, const StepShape& shape, const DcpSharding& dcp, int dcp_rank,
              int padded_tokens, int padded_reqs);

  [[nodiscard]] CommonAttentionMetadata common() const;
  [[nodiscard]] std::span<const std::int32_t> query_start_loc() const { return query_start_loc_; }
  [[nodiscard]] std::span<const std::int32_t> seq_lens() const { return seq_lens_; }
  [[nodiscard]] std::span<const std::span<const std::int32_t>> block_table_rows() const {
    return rows_;
  }
  [[nodiscard]] std::span<const std::int64_t> slot_mapping() const { return slot_mapping_; }

 private:
  /// Empty metadata for a step of `shape` padded to these counts, table rows `stride` long.
  void reset(const StepShape& shape, int stride, int padded_tokens, int padded_reqs);
  /// query_start_loc past the first `num_reqs` requests: flat (padding has no new tokens).
  void pad_requests(int num_reqs);

  std::vector<std::int32_t> query_start_loc_, seq_lens_;
  std::vector<std::int32_t> dcp_context_lens_;  // under DCP only
  std::vector<std::span<const std::int32_t>> rows_;
  std::vector<std::int64_t> slot_mapping_;
  int block_table_stride_ = 0;
  int num_tokens_ = 0;
  int num_decodes_ = 0;
};

}  // namespace freezeframe
