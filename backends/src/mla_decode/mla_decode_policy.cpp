// The MLA decode kernel's split count and scratch (mla_decode.h).

#include <algorithm>

#include "mla_decode/mla_decode.h"

namespace freezeframe::mla_decode {
namespace {

int ctas_per_row(int num_heads) {
  const int heads = heads_per_cta(num_heads);
  return (num_heads + heads - 1) / heads;
}

}  // namespace

int heads_per_cta(int num_heads) { return num_heads <= 16 ? 16 : 32; }

DecodeSplitPolicy split_policy(const DeviceProperties* device) {
  DecodeSplitPolicy policy = device != nullptr ? DecodeSplitPolicy::for_device(*device)
                                               : DecodeSplitPolicy::for_current_device();
  policy.max_splits = kMaxSplits;
  policy.resident_ctas_per_sm = 1;  // ~170 KiB of shared memory a CTA
  // A split writes and the combine reads 2 KiB a head (its f32 partial output): for 16 heads
  // about half a 64-position tile of the latent cache.
  policy.min_tokens_per_split = 512;
  return policy;
}

int split_count(const DecodeSplitPolicy& policy, int num_heads, int rows, long max_seq_tokens) {
  return policy.splits(rows, ctas_per_row(num_heads), max_seq_tokens);
}

std::size_t workspace_bytes(const DecodeSplitPolicy& policy, int num_heads, int max_rows,
                            long max_seq_tokens) {
  std::size_t most = 0;
  for (int rows = 1; rows <= max_rows; ++rows) {
    const int splits = policy.most_splits(rows, ctas_per_row(num_heads), max_seq_tokens);
    most = std::max(most, MlaDecodeWorkspace(num_heads, splits, rows).total);
  }
  return most;
}

}  // namespace freezeframe::mla_decode
