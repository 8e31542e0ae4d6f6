#pragma once
// How many KV splits a decode step gets. The count depends only on the step's row count, the
// CTAs per row and the device, never on sequence lengths, so a captured graph's launch is
// right for any lengths it replays with.

#include <algorithm>

#include "paged_decode/decode_params.h"

namespace freezeframe {

struct DecodeSplitPolicy {
  int sm_count = 132;  ///< H100 SXM / H200
  int max_splits = paged_decode::kMaxSplits;
  /// CTAs per SM the launch aims for in total: enough waves that the last, partial wave of a
  /// multi-wave launch costs little (about 3 CTAs of the decode kernel fit on an SM at once).
  int ctas_per_sm = 16;

  /// Reads the current device's multiprocessor count (132 assumed without a GPU).
  static DecodeSplitPolicy for_current_device();

  /// A split covers at least this many positions of the longest sequence the step may hold.
  int min_tokens_per_split = 256;

  /// Splits that bring the launch to about ctas_per_sm CTAs per SM, and no more than the
  /// longest possible sequence (max_seq_tokens: the block table's row length × the block size,
  /// a property of the deployment, not of the step) can use.
  [[nodiscard]] int splits(int rows, int ctas_per_row, long max_seq_tokens) const {
    const long ctas = std::max(1L, static_cast<long>(rows) * ctas_per_row);
    const long wanted = (static_cast<long>(ctas_per_sm) * sm_count + ctas - 1) / ctas;
    const long useful = (max_seq_tokens + min_tokens_per_split - 1) / min_tokens_per_split;
    return static_cast<int>(std::clamp(std::min(wanted, useful), 1L, static_cast<long>(max_splits)));
  }
};

}  // namespace freezeframe
