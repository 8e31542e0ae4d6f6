#pragma once
// Synthetic batches: host metadata for a step with given decode and prefill lengths, over a
// block pool with randomly permuted block ids. Used by the demo, tests and benchmarks.

#include <cstdint>
#include <vector>

#include "freezeframe/backends/attention_metadata.h"

namespace freezeframe {

struct SyntheticBatchSpec {
  std::vector<int> decode_seq_lens = {};  ///< KV length of each decode (its one new token included)
  struct Prefill {
    int seq_len;    ///< context + new tokens
    int query_len;  ///< new tokens
  };
  std::vector<Prefill> prefills = {};
  int block_size = 16;
  int padding_rows = 0;  ///< query rows past the last request (as a padded graph batch has)
  int spare_blocks = 3;  ///< pool blocks no request uses
  /// Blocks a row of the block table holds: at least the widest request's; a deployment's is
  /// max_model_len / block_size, which the decode kernels' split count is chosen from.
  int block_table_stride = 0;
  std::uint64_t seed = 1;  ///< block ids are a seeded random permutation of the pool
};

struct SyntheticBatch {
  std::vector<std::int32_t> query_start_loc, seq_lens, block_table;
  std::vector<std::int64_t> slot_mapping;  ///< the new tokens' slots (−1 for padding)
  /// Slots of every earlier position, request by request.
  std::vector<std::int64_t> context_slot_mapping;
  int block_table_stride = 0;
  int num_decodes = 0;
  int num_tokens = 0;  ///< query rows, padding included
  int num_blocks = 0;  ///< pool size
  int block_size = 0;

  [[nodiscard]] int num_reqs() const { return static_cast<int>(seq_lens.size()); }
  /// A view of this batch (valid while it lives).
  [[nodiscard]] CommonAttentionMetadata metadata() const;
  /// Limits that fit exactly this batch.
  [[nodiscard]] BatchLimits limits() const;
};

[[nodiscard]] SyntheticBatch make_synthetic_batch(const SyntheticBatchSpec& spec);

}  // namespace freezeframe
